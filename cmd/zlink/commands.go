package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// common are the flags every command takes: where etcd is and how to reach the nodes.
type common struct {
	etcd     string
	mesh     string
	timeout  time.Duration
	caFile   string
	certFile string
	keyFile  string
	etcdUser string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.etcd, "etcd", "", "etcd endpoints host:port,... where the nodes register (required)")
	fs.StringVar(&c.mesh, "mesh", "default", "the mesh's name")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long etcd and each node's admin server may take to answer")
	fs.StringVar(&c.caFile, "cacert", "", "PEM file of the CA that signed etcd's and the admin servers' certificates (TLS)")
	fs.StringVar(&c.certFile, "cert", "", "PEM file of this caller's client certificate, for etcd and the admin servers (with -key)")
	fs.StringVar(&c.keyFile, "key", "", "PEM file of the client certificate's key")
	fs.StringVar(&c.etcdUser, "etcd-user", "", "etcd user name; the password is read from ZLINK_ETCD_PASSWORD")
}

// parse parses args into fs; -h returns the help text as helpShown.
func parse(fs *flag.FlagSet, args []string, synopsis string) error {
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.Usage = func() {
		fmt.Fprintf(&help, "usage: zlink %s %s\n\nflags:\n", fs.Name(), synopsis)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpShown(help.String())
		}
		return usagef("%v (zlink %s -h lists the flags)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

func (c *common) check() error {
	switch {
	case c.etcd == "":
		return usagef("-etcd is required: the etcd endpoints where the nodes register")
	case c.timeout <= 0:
		return usagef("-timeout %v: it must be positive", c.timeout)
	case (c.certFile == "") != (c.keyFile == ""):
		return usagef("-cert and -key go together")
	}
	if err := sdk.ValidateID("mesh name", c.mesh); err != nil {
		return usagef("-mesh: %v", err)
	}
	return nil
}

// tlsConfig is the caller's TLS configuration, nil when no TLS flag is set.
func (c *common) tlsConfig() (*tls.Config, error) {
	if c.caFile == "" && c.certFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert %s: no PEM certificate in it", c.caFile)
		}
		cfg.RootCAs = pool
	}
	if c.certFile != "" {
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert/-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// nodes lists the mesh's registered nodes.
func (c *common) nodes(ctx context.Context, tlsCfg *tls.Config) ([]rt.NodeInfo, error) {
	cfg := rt.Config{
		EtcdEndpoints: strings.Split(c.etcd, ","), EtcdDialTimeout: c.timeout, MeshName: c.mesh, EtcdTLS: tlsCfg,
		EtcdUsername: c.etcdUser, EtcdPassword: os.Getenv("ZLINK_ETCD_PASSWORD"),
	}
	if c.etcdUser != "" && cfg.EtcdPassword == "" {
		return nil, usagef("-etcd-user needs the password in ZLINK_ETCD_PASSWORD")
	}
	return rt.ListNodes(ctx, cfg)
}

// node finds one node's registration.
func (c *common) node(ctx context.Context, tlsCfg *tls.Config, id string) (rt.NodeInfo, error) {
	nodes, err := c.nodes(ctx, tlsCfg)
	if err != nil {
		return rt.NodeInfo{}, err
	}
	var ids []string
	for _, n := range nodes {
		if string(n.ID) == id {
			if n.AdminURL == "" {
				return rt.NodeInfo{}, fmt.Errorf("node %s serves no admin server (its AdminAddr is not set)", id)
			}
			return n, nil
		}
		ids = append(ids, string(n.ID))
	}
	if len(ids) == 0 {
		return rt.NodeInfo{}, fmt.Errorf("node %s is not registered in mesh %q: no node is", id, c.mesh)
	}
	return rt.NodeInfo{}, fmt.Errorf("node %s is not registered in mesh %q (registered: %s)", id, c.mesh, strings.Join(ids, ", "))
}

func httpClient(tlsCfg *tls.Config, timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ResponseHeaderTimeout: timeout, DisableKeepAlives: true}}
}

// The parts of the admin server's /status document (docs/ADMIN.md) that the table shows.
type statusDoc struct {
	Node    string `json:"node"`
	Runtime struct {
		State string `json:"state"`
	} `json:"runtime"`
	MeshStatus struct {
		State   string `json:"state"`
		IsReady bool   `json:"isReady"`
		Peers   []struct {
			Node  string `json:"node"`
			State string `json:"state"`
		} `json:"peers"`
		Placement struct {
			IsAvailable       bool    `json:"isAvailable"`
			ActiveSpotCount   int     `json:"activeSpotCount"`
			ActiveActorCount  int     `json:"activeActorCount"`
			UnavailableReason *string `json:"unavailableReason"`
		} `json:"placement"`
	} `json:"meshStatus"`
}

// status prints the mesh table.
func status(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var c common
	c.register(fs)
	if err := parse(fs, args, "-etcd host:port[,...] [flags]"); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return err
	}
	nodes, err := c.nodes(ctx, tlsCfg)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		fmt.Fprintf(out, "no node is registered in mesh %q\n", c.mesh)
		return nil
	}
	client := httpClient(tlsCfg, c.timeout)
	docs := make([]*statusDoc, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.AdminURL == "" {
			errs[i] = errors.New("no admin server")
			continue
		}
		wg.Go(func() {
			d, err := fetchStatus(ctx, client, n.AdminURL, c.timeout)
			if err == nil && d.Node != string(n.ID) {
				// The registration's address leads to another node's server (a node replaced
				// on the same port, a wildcard address): its state is not this node's.
				d, err = nil, fmt.Errorf("answers for node %q, not %q", d.Node, n.ID)
			}
			docs[i], errs[i] = d, err
		})
	}
	wg.Wait()
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVERSION\tSTATE\tMESH\tREADY\tPEERS\tSPOTS\tACTORS\tPLACEMENT\tADMIN")
	for i, n := range nodes {
		d := docs[i]
		if d == nil {
			fmt.Fprintf(tw, "%s\t%d\t%s (registered)\t-\t-\t-\t-\t-\t-\t%s: %v\n", n.ID, n.ApplicationVersion, n.State, orNone(n.AdminURL), errs[i])
			continue
		}
		peers := make([]string, 0, len(d.MeshStatus.Peers))
		for _, p := range d.MeshStatus.Peers {
			peers = append(peers, p.Node+":"+p.State)
		}
		if len(peers) == 0 {
			peers = append(peers, "-")
		}
		pl := d.MeshStatus.Placement
		placement := "available"
		if !pl.IsAvailable {
			placement = "unavailable"
			if pl.UnavailableReason != nil {
				placement += " (" + *pl.UnavailableReason + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%t\t%s\t%d\t%d\t%s\t%s\n", n.ID, n.ApplicationVersion, d.Runtime.State, d.MeshStatus.State,
			d.MeshStatus.IsReady, strings.Join(peers, " "), pl.ActiveSpotCount, pl.ActiveActorCount, placement, n.AdminURL)
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// fetchStatus reads a node's /status within timeout.
func fetchStatus(ctx context.Context, client *http.Client, base string, timeout time.Duration) (*statusDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer within %v", timeout)
		}
		return nil, errors.New("does not answer")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	var d statusDoc
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&d); err != nil {
		return nil, fmt.Errorf("answered no status document: %v", err)
	}
	return &d, nil
}

// progress is a line of an operation's answer stream (docs/ADMIN.md).
type progress struct {
	Node       string `json:"node"`
	State      string `json:"state"`
	Relocation *struct {
		Units int64 `json:"units"`
		Moved int64 `json:"moved"`
		Gone  int64 `json:"gone"`
	} `json:"relocation"`
	Done             bool `json:"done"`
	RelocationResult *struct {
		Mode                     string `json:"mode"`
		TargetApplicationVersion int64  `json:"targetApplicationVersion"`
		Outcome                  string `json:"outcome"`
		Reason                   string `json:"reason"`
	} `json:"relocationResult"`
	TerminationResult *struct {
		Outcome string `json:"outcome"`
		Reason  string `json:"reason"`
	} `json:"terminationResult"`
	Error string `json:"error"`
}

// relocate relocates a node's objects and prints the progress.
func relocate(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("relocate", flag.ContinueOnError)
	var c common
	c.register(fs)
	node := fs.String("node", "", "the node to relocate (required)")
	mode := fs.String("mode", "", "planned (to nodes of the node's own version) or rolling (to nodes of -version) (required)")
	version := fs.Int64("version", 0, "with -mode rolling: the application version to move to, greater than the node's")
	deadline := fs.Duration("deadline", 0, "bound of the whole relocation (default: the node's RelocationDeadline)")
	if err := parse(fs, args, "-etcd host:port[,...] -node ID -mode planned|rolling [-version N] [flags]"); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := checkNode(*node); err != nil {
		return err
	}
	versionSet := false
	fs.Visit(func(f *flag.Flag) { versionSet = versionSet || f.Name == "version" })
	body := map[string]any{}
	switch *mode {
	case "planned":
		if versionSet {
			return usagef("-mode planned takes no -version: it moves to nodes of the node's own version")
		}
	case "rolling":
		if !versionSet {
			return usagef("-mode rolling needs -version, the application version to move to")
		}
		body["targetApplicationVersion"] = *version
	case "":
		return usagef("-mode is required: planned or rolling")
	default:
		return usagef("-mode %q: use planned or rolling", *mode)
	}
	body["mode"] = *mode
	if *deadline < 0 {
		return usagef("-deadline %v: it must be positive", *deadline)
	}
	if *deadline > 0 {
		body["deadline"] = deadline.String()
	}
	lines, err := operate(ctx, &c, *node, "/relocate", body)
	if err != nil {
		return err
	}
	last := ""
	for p, err := range lines {
		if err != nil {
			return err
		}
		switch {
		case p.Done && p.Error != "":
			return fmt.Errorf("node %s: %s", p.Node, p.Error)
		case p.Done && p.RelocationResult != nil:
			r := p.RelocationResult
			fmt.Fprintf(out, "%s %s: %s/%s (%s to version %d)\n", p.Node, p.State, r.Outcome, r.Reason, r.Mode, r.TargetApplicationVersion)
			if r.Outcome != "Relocated" {
				return fmt.Errorf("node %s did not relocate: %s", p.Node, r.Reason)
			}
			return nil
		case !p.Done:
			line := p.Node + " " + p.State
			if r := p.Relocation; r != nil {
				line += fmt.Sprintf(": %d of %d units moved", r.Moved, r.Units)
				if r.Gone > 0 {
					line += fmt.Sprintf(", %d gone", r.Gone)
				}
			}
			if line != last {
				fmt.Fprintln(out, line)
				last = line
			}
		}
	}
	return errors.New("the node's answer ended before the relocation's result")
}

// shutdown shuts a node down and prints its states until it stopped.
func shutdown(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("shutdown", flag.ContinueOnError)
	var c common
	c.register(fs)
	node := fs.String("node", "", "the node to shut down (required)")
	deadline := fs.Duration("deadline", 0, "bound of the shutdown, after which the rest is force-stopped (default: the node's StopTimeout)")
	if err := parse(fs, args, "-etcd host:port[,...] -node ID [flags]"); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if err := checkNode(*node); err != nil {
		return err
	}
	body := map[string]any{}
	if *deadline < 0 {
		return usagef("-deadline %v: it must be positive", *deadline)
	}
	if *deadline > 0 {
		body["deadline"] = deadline.String()
	}
	lines, err := operate(ctx, &c, *node, "/shutdown", body)
	if err != nil {
		return err
	}
	for p, err := range lines {
		if err != nil {
			return err
		}
		switch {
		case p.Done && p.TerminationResult != nil:
			r := p.TerminationResult
			fmt.Fprintf(out, "%s %s: %s/%s\n", p.Node, p.State, r.Outcome, r.Reason)
			if r.Outcome != "Stopped" {
				return fmt.Errorf("node %s was force-stopped: %s", p.Node, r.Reason)
			}
			return nil
		case p.Done:
			return fmt.Errorf("node %s: %s", p.Node, cmpOr(p.Error, "no result"))
		default:
			fmt.Fprintf(out, "%s %s\n", p.Node, p.State)
		}
	}
	return errors.New("the node's answer ended before the shutdown's result")
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

func checkNode(id string) error {
	if id == "" {
		return usagef("-node is required: the ID of the node")
	}
	if err := sdk.NodeID(id).Validate(); err != nil {
		return usagef("-node: %v", err)
	}
	return nil
}

// operate POSTs body to the node's admin server at path and returns its answer's lines.
func operate(ctx context.Context, c *common, id, path string, body map[string]any) (func(yield func(progress, error) bool), error) {
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	n, err := c.node(ctx, tlsCfg, id)
	if err != nil {
		return nil, err
	}
	// The server refuses an operation meant for another node: the registration's address can
	// lead to another node's server.
	body["node"] = id
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.AdminURL+path, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("node %s's admin URL %q: %v", id, n.AdminURL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient(tlsCfg, c.timeout).Do(req)
	if err != nil {
		return nil, fmt.Errorf("node %s's admin server at %s does not answer: %v", id, n.AdminURL, rootCause(err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		return nil, fmt.Errorf("node %s refused (%s): %s", id, resp.Status, cmpOr(e.Error, "no reason given"))
	}
	return func(yield func(progress, error) bool) {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var p progress
			if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
				yield(progress{}, fmt.Errorf("node %s answered a line that is not progress: %q", id, sc.Text()))
				return
			}
			if !yield(p, nil) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			yield(progress{}, fmt.Errorf("node %s's answer broke off: %v", id, rootCause(err)))
		}
	}, nil
}

// rootCause is the innermost error of err, for a line that names the problem without the
// layers of wrapping around it.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
