package store_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
)

var etcd *devetcd.Server

func TestMain(m *testing.M) {
	code := run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	var err error
	etcd, err = devetcd.Start(context.Background(), devetcd.WithoutFsync())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Close()
	return m.Run()
}

func newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   etcd.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var meshSeq atomic.Int64

// newStore returns a store on its own mesh, so that tests sharing the server never meet.
func newStore(t testing.TB) *store.Etcd {
	t.Helper()
	s, err := store.New(newClient(t), fmt.Sprintf("%s-%d", t.Name(), meshSeq.Add(1)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// register registers a node and closes it at the end of the test.
func register(t testing.TB, s store.Store, id string, opts store.LeaseOptions) *store.Registration {
	t.Helper()
	reg, err := s.Register(context.Background(), &storepb.NodeDescriptor{NodeId: id, Roles: 1, Weight: 1}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	return reg
}

func nodeDesc(id string) *storepb.NodeDescriptor {
	return &storepb.NodeDescriptor{NodeId: id, Roles: 1, Weight: 1}
}

func meshOf(t testing.TB, s *store.Etcd) string { return s.Mesh() }

func nodeKeyOf(t testing.TB, s *store.Etcd, id string) string {
	return "/zlink/" + s.Mesh() + "/nodes/" + id
}
