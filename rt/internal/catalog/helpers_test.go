package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/rt/devetcd"
	"github.com/zlink-go/zlink/rt/internal/catalog"
	"github.com/zlink-go/zlink/rt/internal/exec"
	"github.com/zlink-go/zlink/rt/internal/store"
	"github.com/zlink-go/zlink/rt/internal/store/storepb"
	"github.com/zlink-go/zlink/sdk"
)

var etcd *devetcd.Server

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		etcd, err = devetcd.Start(context.Background(), devetcd.WithoutFsync())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer etcd.Close()
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var ctx = context.Background()

// fixture records what the test Spots did.
type fixture struct {
	mu        sync.Mutex
	factories map[string]int // Spot ID -> factory runs
	closes    map[string][]sdk.CloseReason
	said      []string
	failWith  map[string]error // Spot ID -> factory error
	panicIn   map[string]bool  // Spot ID -> factory panics
	release   chan struct{}    // Block handlers wait on it
	blocked   chan string      // Block handlers announce themselves
	ticks     atomic.Int64
	tickOf    map[string]int // Spot ID -> timer runs
	// hangOnClose: Spot ID -> its closing callback waits for release, ignoring its context.
	hangOnClose map[string]bool
	// building: Spot ID -> its factory waits for release, announcing itself on blocked.
	building map[string]bool
	// outer is the node's own client, as a handler might capture it instead of using its
	// SpotContext's.
	outer sdk.Client
	// probe is what the Probe handlers report of their turn's context.
	probe func(ctx context.Context) string
	// contexts: Spot ID -> the SpotContext of its latest activation, and what its TurnStart
	// said in the factory.
	contexts     map[string]sdk.SpotContext
	builtAtStart map[string]time.Time
}

func newFixture() *fixture {
	return &fixture{
		factories: map[string]int{}, closes: map[string][]sdk.CloseReason{},
		failWith: map[string]error{}, panicIn: map[string]bool{},
		release: make(chan struct{}), blocked: make(chan string, 1024),
		hangOnClose: map[string]bool{}, building: map[string]bool{}, tickOf: map[string]int{},
		contexts: map[string]sdk.SpotContext{}, builtAtStart: map[string]time.Time{},
	}
}

// tick records one timer run of the Spot id.
func (f *fixture) tick(id string) {
	f.ticks.Add(1)
	f.mu.Lock()
	f.tickOf[id]++
	f.mu.Unlock()
}

func (f *fixture) ticksOf(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tickOf[id]
}

func (f *fixture) set(m map[string]bool, id string) {
	f.mu.Lock()
	m[id] = true
	f.mu.Unlock()
}

func (f *fixture) said1(msg string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.said {
		if s == msg {
			return true
		}
	}
	return false
}

// spotContext returns the SpotContext of the latest activation of the Spot id.
func (f *fixture) spotContext(id string) sdk.SpotContext {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.contexts[id]
}

func (f *fixture) factoryRuns(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.factories[id]
}

func (f *fixture) closeReasons(id string) []sdk.CloseReason {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sdk.CloseReason(nil), f.closes[id]...)
}

func (f *fixture) totalCloses(r sdk.CloseReason) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, rs := range f.closes {
		for _, x := range rs {
			if x == r {
				n++
			}
		}
	}
	return n
}

// spot is the object behind every test Spot type.
type spot struct {
	f     *fixture
	sc    sdk.SpotContext
	joins int
}

func (s *spot) S() *spot { return s }

func (s *spot) OnClose(_ context.Context, r sdk.CloseReason) {
	s.f.mu.Lock()
	s.f.closes[s.sc.ID()] = append(s.f.closes[s.sc.ID()], r)
	hang := s.f.hangOnClose[s.sc.ID()]
	s.f.mu.Unlock()
	if hang {
		s.f.blocked <- "onclose:" + s.sc.ID()
		<-s.f.release
	}
}

func str(v string) *wrapperspb.StringValue { return wrapperspb.String(v) }

// senderKey names a value that a sender's context carries to a one-way handler.
type senderKey struct{}

func method(name string, oneWay bool, fn func(s *spot, ctx context.Context, in string) (string, error)) sdk.MethodDesc {
	return sdk.MethodDesc{
		Name:       name,
		OneWay:     oneWay,
		NewRequest: func() proto.Message { return new(wrapperspb.StringValue) },
		NewReply:   func() proto.Message { return new(wrapperspb.StringValue) },
		Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {
			out, err := fn(impl.(interface{ S() *spot }).S(), ctx, req.(*wrapperspb.StringValue).GetValue())
			if err != nil || oneWay {
				return nil, err
			}
			return str(out), nil
		},
	}
}

var methods = []sdk.MethodDesc{
	method("Join", false, func(s *spot, _ context.Context, in string) (string, error) {
		s.joins++
		return fmt.Sprintf("%s joined %s #%d", in, s.sc.ID(), s.joins), nil
	}),
	method("Say", true, func(s *spot, _ context.Context, in string) (string, error) {
		s.f.mu.Lock()
		s.f.said = append(s.f.said, s.sc.ID()+":"+in)
		s.f.mu.Unlock()
		return "", nil
	}),
	method("Block", false, func(s *spot, ctx context.Context, in string) (string, error) {
		s.f.blocked <- s.sc.ID()
		select {
		case <-s.f.release:
			return "released", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}),
	method("BlockSend", true, func(s *spot, ctx context.Context, in string) (string, error) {
		s.f.blocked <- s.sc.ID()
		<-s.f.release
		return "", nil
	}),
	method("Boom", false, func(s *spot, _ context.Context, in string) (string, error) {
		panic("boom " + in)
	}),
	method("Fail", false, func(s *spot, _ context.Context, in string) (string, error) {
		return "", sdk.Errorf("room_full", "room %s is full", s.sc.ID())
	}),
	method("Tick", false, func(s *spot, _ context.Context, in string) (string, error) {
		d, _ := time.ParseDuration(in)
		s.sc.Every(d, func(context.Context) { s.f.tick(s.sc.ID()) })
		return "ticking", nil
	}),
	method("TickKeepAlive", false, func(s *spot, _ context.Context, in string) (string, error) {
		d, _ := time.ParseDuration(in)
		s.sc.Every(d, func(context.Context) { s.f.tick(s.sc.ID()) }, sdk.KeepAlive())
		return "ticking", nil
	}),
	method("Quit", true, func(s *spot, ctx context.Context, in string) (string, error) {
		return "", s.sc.Client().CloseSpot(ctx, sdk.InstanceTarget(roomType, s.sc.ID()))
	}),
	method("QuitOuter", true, func(s *spot, ctx context.Context, in string) (string, error) {
		err := s.f.outer.CloseSpot(ctx, sdk.InstanceTarget(roomType, s.sc.ID()))
		s.f.mu.Lock()
		s.f.said = append(s.f.said, fmt.Sprintf("%s:quit:%v", s.sc.ID(), err != nil))
		s.f.mu.Unlock()
		return "", err
	}),
	method("AskSelf", false, func(s *spot, ctx context.Context, in string) (string, error) {
		_, err := s.sc.Client().Call(ctx, sdk.InstanceTarget(roomType, s.sc.ID()), "Join", str("me"))
		return fmt.Sprint(err), nil
	}),
	method("AwaitEnd", true, func(s *spot, ctx context.Context, in string) (string, error) {
		if v, ok := ctx.Value(senderKey{}).(string); ok {
			s.f.mu.Lock()
			s.f.said = append(s.f.said, s.sc.ID()+":value:"+v)
			s.f.mu.Unlock()
		}
		s.f.blocked <- "awaitend:" + s.sc.ID()
		select {
		case <-ctx.Done():
			s.f.mu.Lock()
			s.f.said = append(s.f.said, s.sc.ID()+":ctx-ended")
			s.f.mu.Unlock()
		case <-s.f.release:
		}
		return "", nil
	}),
	method("FailWith", false, func(s *spot, _ context.Context, in string) (string, error) {
		s.f.mu.Lock()
		s.f.said = append(s.f.said, s.sc.ID()+":failwith:"+in)
		s.f.mu.Unlock()
		return "", fmt.Errorf("nested call failed: %w", nested[in])
	}),
	method("Fence", false, func(s *spot, _ context.Context, in string) (string, error) {
		f := s.sc.Fence()
		return fmt.Sprintf("%d/%d", f.Epoch, f.Lease), nil
	}),
	// TurnStart answers the turn's TurnStart and then the handler's own clock, in Unix
	// nanoseconds. It fails if TurnStart answers differently when asked again in the turn.
	method("TurnStart", false, func(s *spot, _ context.Context, in string) (string, error) {
		start := s.sc.TurnStart()
		time.Sleep(time.Millisecond)
		if again := s.sc.TurnStart(); again != start {
			return "", fmt.Errorf("TurnStart said %v, then %v in the same turn", start, again)
		}
		return fmt.Sprint(start.UnixNano(), " ", time.Now().UnixNano()), nil
	}),
	// AfterStamp schedules a timer, after the duration in, that says its turn's TurnStart.
	method("AfterStamp", false, func(s *spot, _ context.Context, in string) (string, error) {
		d, _ := time.ParseDuration(in)
		s.sc.AfterFunc(d, func(context.Context) {
			s.f.mu.Lock()
			s.f.said = append(s.f.said, fmt.Sprint(s.sc.ID(), ":timer:", s.sc.TurnStart().UnixNano()))
			s.f.mu.Unlock()
		})
		return "scheduled", nil
	}),
	method("Probe", false, func(s *spot, ctx context.Context, in string) (string, error) {
		return s.f.probe(ctx), nil
	}),
	method("Relay", true, func(s *spot, ctx context.Context, in string) (string, error) {
		return "", s.sc.Client().Send(ctx, sdk.InstanceTarget(roomType, in), "ProbeSend", str(""))
	}),
	method("ProbeSend", true, func(s *spot, ctx context.Context, in string) (string, error) {
		s.f.mu.Lock()
		s.f.said = append(s.f.said, s.sc.ID()+":probe:"+s.f.probe(ctx))
		s.f.mu.Unlock()
		return "", nil
	}),
	method("After", false, func(s *spot, _ context.Context, in string) (string, error) {
		d, _ := time.ParseDuration(in)
		s.sc.AfterFunc(d, func(context.Context) { s.f.tick(s.sc.ID()) })
		return "scheduled", nil
	}),
}

// nested are errors a handler may get from calls of its own and return.
var nested = map[string]error{
	"stale":     sdk.ErrStaleRoute,
	"notfound":  sdk.ErrNotFound,
	"closing":   exec.ErrAdmissionClosed,
	"capacity":  &sdk.CapacityError{Where: sdk.CapacityActivationCap, Limit: 1},
	"queuefull": &sdk.QueueFullError{Lane: sdk.LaneApplication, Axis: sdk.AxisCount, Limit: 1},
	"app":       sdk.Errorf("inner_code", "inner message"),
}

const (
	roomType   = "test.Room"
	playerType = "test.Player"
	lobbyType  = "test.Lobby"
)

func factory(f *fixture) sdk.Factory {
	return func(sc sdk.SpotContext) (any, error) {
		f.mu.Lock()
		f.factories[sc.ID()]++
		f.contexts[sc.ID()] = sc
		f.builtAtStart[sc.ID()] = sc.TurnStart()
		err, panics, hang := f.failWith[sc.ID()], f.panicIn[sc.ID()], f.building[sc.ID()]
		f.mu.Unlock()
		if hang {
			f.blocked <- "factory:" + sc.ID()
			<-f.release
		}
		if panics {
			panic("factory panic for " + sc.ID())
		}
		if err != nil {
			return nil, err
		}
		return &spot{f: f, sc: sc}, nil
	}
}

// node is one catalog on a registered node.
type node struct {
	cat   *catalog.Catalog
	store *store.Etcd
	reg   *store.Registration
	f     *fixture
}

type nodeOpts struct {
	mesh     string
	id       string
	cfg      func(*catalog.Config)
	register func(*catalog.Types, *fixture)
	fixture  *fixture
	// wrap, when set, puts a store of the test's between the catalog and etcd.
	wrap func(*store.Etcd) store.Store
	// lease sets the node's owner lease options.
	lease store.LeaseOptions
	// peers, when set, is how the node reaches other nodes for moves.
	peers catalog.Peers
}

// catClient is the node's client in catalog tests: every target is on this node.
type catClient struct{ cat *catalog.Catalog }

func (c catClient) Call(ctx context.Context, t sdk.Target, m string, req proto.Message, _ ...sdk.CallOption) (proto.Message, error) {
	return c.cat.Call(ctx, t, m, req)
}

func (c catClient) Send(ctx context.Context, t sdk.Target, m string, msg proto.Message, _ ...sdk.CallOption) error {
	return c.cat.Send(ctx, t, m, msg)
}

func (c catClient) Create(ctx context.Context, t sdk.Target, _ ...sdk.CallOption) error {
	return c.cat.Create(ctx, t)
}

func (c catClient) CloseSpot(ctx context.Context, t sdk.Target, _ ...sdk.CallOption) error {
	return c.cat.CloseTarget(ctx, t)
}

func (c catClient) MoveActor(ctx context.Context, actor, to sdk.Target, _ ...sdk.CallOption) error {
	act, ok := c.cat.LocalActor(actor)
	if !ok {
		return fmt.Errorf("%w: %v is not on this node", sdk.ErrNotFound, actor)
	}
	return c.cat.MoveActor(ctx, act, to)
}

func (c catClient) LocalNode() sdk.NodeID { return "node-a" }

// Channels are the mesh's: catalog tests have none.
func (c catClient) CallChannel(context.Context, *sdk.ChannelDesc, string, proto.Message, ...sdk.CallOption) (proto.Message, error) {
	return nil, sdk.ErrUnsupported
}

func (c catClient) SendChannel(context.Context, *sdk.ChannelDesc, string, proto.Message, ...sdk.CallOption) error {
	return sdk.ErrUnsupported
}

func (c catClient) Publish(context.Context, *sdk.ChannelDesc, string, proto.Message, ...sdk.CallOption) error {
	return sdk.ErrUnsupported
}

var meshSeq atomic.Int64

func uniqueMesh(t testing.TB) string { return fmt.Sprintf("%s-%d", t.Name(), meshSeq.Add(1)) }

func newClient(t testing.TB) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func registerAll(ts *catalog.Types, f *fixture) {
	must(ts.RegisterSpot(&sdk.SpotDesc{Name: roomType, Kind: sdk.KindInstance, Methods: methods}, factory(f)))
	must(ts.RegisterSpot(&sdk.SpotDesc{Name: playerType, Kind: sdk.KindUser, Methods: methods}, factory(f)))
	must(ts.RegisterSpot(&sdk.SpotDesc{Name: lobbyType, Kind: sdk.KindEntry, Methods: methods}, factory(f)))
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func newNode(t testing.TB, o nodeOpts) *node {
	t.Helper()
	if o.mesh == "" {
		o.mesh = uniqueMesh(t)
	}
	if o.id == "" {
		o.id = "node-a"
	}
	if o.fixture == nil {
		o.fixture = newFixture()
	}
	if o.register == nil {
		o.register = registerAll
	}
	st, err := store.New(newClient(t), o.mesh)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	reg, err := st.Register(ctx, &storepb.NodeDescriptor{NodeId: o.id, Roles: 1, Weight: 1}, o.lease)
	require.NoError(t, err)
	types := &catalog.Types{}
	o.register(types, o.fixture)
	cfg := catalog.Config{Node: sdk.NodeID(o.id), Exec: exec.DefaultConfig(), Logger: slog.New(slog.DiscardHandler)}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	var wrapped store.Store = st
	if o.wrap != nil {
		wrapped = o.wrap(st)
	}
	cat, err := catalog.New(cfg, wrapped, reg, types, nil)
	require.NoError(t, err)
	o.fixture.outer = catClient{cat}
	cat.SetClient(catClient{cat})
	if o.peers != nil {
		cat.SetPeers(o.peers)
	}
	require.NoError(t, cat.Start(ctx))
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = cat.Close(c)
		_ = reg.Close(c)
	})
	return &node{cat: cat, store: st, reg: reg, f: o.fixture}
}

func (n *node) call(id, m, in string) (string, error) {
	return n.callT(sdk.InstanceIntent(roomType, id), m, in)
}

func (n *node) callT(t sdk.Target, m, in string) (string, error) {
	out, err := n.cat.Call(ctx, t, m, str(in))
	if err != nil {
		return "", err
	}
	return out.(*wrapperspb.StringValue).GetValue(), nil
}

func (n *node) lookup(t testing.TB, typ, id string) store.Resolution {
	t.Helper()
	r, err := n.store.Lookup(ctx, store.SpotKey{Type: typ, ID: id})
	require.NoError(t, err)
	return r
}

var errBoom = errors.New("factory says no")

// lookingSpot looks its own record up from its closing callback.
type lookingSpot struct {
	spot
	st   *store.Etcd
	seen store.Resolution
}

func (l *lookingSpot) OnClose(ctx context.Context, r sdk.CloseReason) {
	l.seen, _ = l.st.Lookup(ctx, store.SpotKey{Type: l.sc.Type(), ID: l.sc.ID()})
}

type lookingRegistry struct {
	mu sync.Mutex
	m  map[string]*lookingSpot
}

func (r *lookingRegistry) put(id string, l *lookingSpot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[id] = l
}

func (r *lookingRegistry) get(id string) *lookingSpot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

var lookingSpots = &lookingRegistry{m: map[string]*lookingSpot{}}

func clientv3LeaseID(l int64) clientv3.LeaseID { return clientv3.LeaseID(l) }

// waitScans waits until at least d has passed and the idle scan has run at least ten times
// since the call, so that a test that asserts nothing happened knows the scans ran.
func waitScans(t *testing.T, n *node, d time.Duration) {
	t.Helper()
	from := n.cat.Stats().IdleScans
	deadline := time.Now().Add(d)
	require.Eventually(t, func() bool {
		return time.Now().After(deadline) && n.cat.Stats().IdleScans >= from+10
	}, d+10*time.Second, time.Millisecond, "the idle scan did not run")
}

// waitAdmissionPaused waits until a close of the Spot id has paused its admission: a probe
// message then waits for the close to be decided instead of being admitted.
func waitAdmissionPaused(t *testing.T, n *node, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		defer cancel()
		err := n.cat.Send(c, sdk.InstanceTarget(roomType, id), "Say", str("probe"))
		return errors.Is(err, context.DeadlineExceeded)
	}, 10*time.Second, time.Millisecond, "the close never paused admission")
}

func nodeDesc(id string) *storepb.NodeDescriptor {
	return &storepb.NodeDescriptor{NodeId: id, Roles: 1, Weight: 1}
}
