package rt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/sdk"
)

// NodeInfo is what a node's registration tells an operator about it.
type NodeInfo struct {
	// ID is the node's identity in the mesh.
	ID sdk.NodeID
	// State is the lifecycle state the node last published.
	State sdk.RuntimeState
	// ApplicationVersion is the version of the application the node runs.
	ApplicationVersion int64
	// ObjectServer says whether the node hosts objects.
	ObjectServer bool
	// MaintenanceWave is the node's maintenance wave, empty when it has none.
	MaintenanceWave string
	// AdminURL is the base URL of the node's admin server (Config.AdminAddr), empty when it
	// serves none.
	AdminURL string
}

// ListNodes lists the nodes registered in the mesh cfg.MeshName (default "default"), sorted by
// ID, reading them from the etcd that cfg names — EtcdEndpoints, with EtcdTLS, EtcdUsername
// and EtcdPassword — without starting a node: how an operator's tool finds the nodes and
// their admin servers. A node is listed while its owner lease lives. EtcdEndpoints must be
// set; etcd not answering within EtcdDialTimeout (or ctx) is an error.
func ListNodes(ctx context.Context, cfg Config) ([]NodeInfo, error) {
	if ctx == nil {
		return nil, errNilContext("ListNodes")
	}
	cfg = cfg.withDefaults()
	if len(cfg.EtcdEndpoints) == 0 {
		return nil, fmt.Errorf("%w: ListNodes needs etcd endpoints", sdk.ErrConfig)
	}
	if err := sdk.ValidateID("mesh name", cfg.MeshName); err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.EtcdEndpoints,
		DialTimeout: cfg.EtcdDialTimeout,
		TLS:         withTLS13(cfg.EtcdTLS),
		Username:    cfg.EtcdUsername,
		Password:    cfg.EtcdPassword,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("rt: etcd client: %w", err)
	}
	defer client.Close()
	s, err := store.New(client, cfg.MeshName, store.WithoutGroupCommit())
	if err != nil {
		return nil, err
	}
	defer s.Close()
	lctx, cancel := context.WithTimeout(ctx, cfg.EtcdDialTimeout)
	defer cancel()
	nodes, _, err := s.Nodes(lctx)
	if err != nil {
		if errors.Is(lctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("rt: etcd at %s did not answer within %v: %w", strings.Join(cfg.EtcdEndpoints, ","), cfg.EtcdDialTimeout, err)
		}
		return nil, fmt.Errorf("rt: etcd at %s: %w", strings.Join(cfg.EtcdEndpoints, ","), err)
	}
	out := make([]NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		d := n.Desc
		out = append(out, NodeInfo{
			ID: n.ID, State: sdk.RuntimeState(d.GetState()), ApplicationVersion: d.GetApplicationVersion(),
			ObjectServer: Role(d.GetRoles()).Has(RoleObjectServer), MaintenanceWave: d.GetMaintenanceWave(), AdminURL: d.GetAdminUrl(),
		})
	}
	return out, nil
}
