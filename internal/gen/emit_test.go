package gen

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/sdk"
)

// instanceModel is the model of the golden case instance (gen_test/testdata/instance) built
// by hand: no go/types identity anywhere, only what the emitter needs.
func instanceModel() *Package {
	const path GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/instance/input"
	room := &Interface{
		Name:     "Room",
		Doc:      "Room is one chat room. It exists while people talk in it.\n",
		Kind:     sdk.KindInstance,
		TypeName: "chat.Room",
		Idle:     5 * time.Minute,
		Methods: []*Method{
			{
				Name:    "Join",
				Doc:     "Join adds a member and answers how many the room has.\n",
				Request: &Message{GoIdent: path.Ident("JoinRequest")},
				Reply:   &Message{GoIdent: path.Ident("JoinReply")},
			},
			{
				Name:    "Leave",
				Doc:     "Leave removes a member.\n",
				Send:    true,
				Request: &Message{GoIdent: path.Ident("LeaveRequest")},
			},
		},
	}
	return &Package{
		Name:         "chat",
		Path:         path,
		PackageNames: map[GoImportPath]GoPackageName{path: "chat"},
		Files:        []*File{{Source: "/x/room.go", Out: "/x/room_zlink.go", Spots: []*Interface{room}}},
		Declared:     []string{"JoinReply", "JoinRequest", "LeaveRequest", "Room"},
	}
}

// nameCollisionsModel is the model of the golden case name_collisions built by hand: the
// package declares names that the generated imports and locals would otherwise take.
func nameCollisionsModel() *Package {
	const (
		path GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/name_collisions/input"
		pb   GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/pb"
	)
	hub := &Interface{
		Name:     "Hub",
		Doc:      "Hub connects players.\n",
		Kind:     sdk.KindUser,
		TypeName: "hub.Hub",
		Methods: []*Method{{
			Name:    "Join",
			Doc:     "Join uses the message of package pb, not the local JoinRequest.\n",
			Request: &Message{GoIdent: pb.Ident("JoinRequest")},
			Reply:   &Message{GoIdent: pb.Ident("JoinReply")},
		}},
	}
	return &Package{
		Name:         "hub",
		Path:         path,
		PackageNames: map[GoImportPath]GoPackageName{path: "hub", pb: "pb"},
		Files:        []*File{{Source: "/x/hub.go", Out: "/x/hub_zlink.go", Spots: []*Interface{hub}}},
		Declared:     []string{"Hub", "JoinRequest", "err", "fmt", "out", "proto", "req", "sdk"},
	}
}

// actorModel is the model of the golden case actor built by hand.
func actorModel() *Package {
	const (
		path GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/actor/input"
		pb   GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/pb"
	)
	pawn := &Interface{
		Name:     "Pawn",
		Doc:      "Pawn is one piece on a board. It lives in whichever Spot it was spawned into or moved to.\n",
		Kind:     sdk.KindActor,
		TypeName: "game.Pawn",
		Methods: []*Method{
			{
				Name:    "Greet",
				Doc:     "Greet answers a ping with a pong.\n",
				Request: &Message{GoIdent: pb.Ident("Ping")},
				Reply:   &Message{GoIdent: pb.Ident("Pong")},
			},
			{
				Name:    "Notify",
				Doc:     "Notify delivers a note to the pawn.\n",
				Send:    true,
				Request: &Message{GoIdent: pb.Ident("Note")},
			},
		},
	}
	return &Package{
		Name:         "game",
		Path:         path,
		PackageNames: map[GoImportPath]GoPackageName{path: "game", pb: "pb"},
		Files:        []*File{{Source: "/x/pawn.go", Out: "/x/pawn_zlink.go", Spots: []*Interface{pawn}}},
		Declared:     []string{"Pawn"},
	}
}

// channelServerModel is the model of the golden case channel_server built by hand.
func channelServerModel() *Package {
	const (
		path GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/channel_server/input"
		pb   GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/pb"
	)
	matchmaker := &Interface{
		Name:     "Matchmaker",
		Doc:      "Matchmaker pairs players for matches. Any node may serve it.\n",
		Channel:  sdk.ChannelClientServer,
		TypeName: "matchmaker",
		Methods: []*Method{
			{
				Name:    "Find",
				Doc:     "Find finds a match for a player.\n",
				Request: &Message{GoIdent: pb.Ident("JoinRequest")},
				Reply:   &Message{GoIdent: pb.Ident("JoinReply")},
			},
			{
				Name:    "Enqueue",
				Doc:     "Enqueue queues a player, one-way.\n",
				Send:    true,
				Request: &Message{GoIdent: pb.Ident("Note")},
			},
			{
				Name:    "Ping",
				Request: &Message{GoIdent: pb.Ident("Ping")},
				Reply:   &Message{GoIdent: pb.Ident("Pong")},
			},
		},
	}
	return &Package{
		Name:         "match",
		Path:         path,
		PackageNames: map[GoImportPath]GoPackageName{path: "match", pb: "pb"},
		Files:        []*File{{Source: "/x/matchmaker.go", Out: "/x/matchmaker_zlink.go", Spots: []*Interface{matchmaker}}},
		Declared:     []string{"Matchmaker", "Serve", "matchmaker"},
	}
}

// channelFanoutModel is the model of the golden case channel_fanout built by hand.
func channelFanoutModel() *Package {
	const (
		path GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/channel_fanout/input"
		pb   GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/pb"
	)
	results := &Interface{
		Name:     "Results",
		Doc:      "Results announces the outcome of matches to every node that cares.\n",
		Channel:  sdk.ChannelFanout,
		TypeName: "results",
		Methods: []*Method{
			{Name: "Reported", Doc: "Reported announces a finished match.\n", Send: true, Request: &Message{GoIdent: pb.Ident("Note")}},
			{Name: "Cancelled", Doc: "Cancelled announces a cancelled match.\n", Send: true, Request: &Message{GoIdent: pb.Ident("LeaveRequest")}},
			{Name: "Tick", Send: true, Request: &Message{GoIdent: pb.Ident("Ping")}},
		},
	}
	return &Package{
		Name:         "match",
		Path:         path,
		PackageNames: map[GoImportPath]GoPackageName{path: "match", pb: "pb"},
		Files:        []*File{{Source: "/x/results.go", Out: "/x/results_zlink.go", Spots: []*Interface{results}}},
		Declared:     []string{"Announce", "Results", "board"},
	}
}

// The emitter reads the model and nothing else: from a model built by hand, without the
// go/types identities that loading sets, it renders the golden output of the case, the names
// it must avoid included.
func TestEmitterWorksFromTheModelAlone(t *testing.T) {
	for name, p := range map[string]*Package{
		"instance": instanceModel(), "name_collisions": nameCollisionsModel(), "actor": actorModel(),
		"channel_server": channelServerModel(), "channel_fanout": channelFanoutModel(),
	} {
		t.Run(name, func(t *testing.T) {
			file := p.Files[0]
			got, err := emitFile(p, file)
			require.NoError(t, err)
			want, err := os.ReadFile(filepath.Join("../../gen_test/testdata", name, "want", filepath.Base(file.Out)))
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// The emitter's files import neither go/types nor go/packages: what they need of the loaded
// packages is in the model.
func TestEmitterDoesNotImportTheTypeChecker(t *testing.T) {
	files, err := filepath.Glob("emit_*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			assert.NotContains(t, []string{"go/types", "go/ast", "golang.org/x/tools/go/packages"}, path, "%s imports %s", name, path)
		}
	}
}

func TestIdentifiersAreFreshAndDeterministic(t *testing.T) {
	ids := &identifiers{taken: map[string]bool{}}
	ids.reserve("ctx", "ctx2")
	assert.Equal(t, "ctx3", ids.fresh("ctx"), "taken names are skipped")
	assert.Equal(t, "ctx4", ids.fresh("ctx"), "a name given is taken")
	assert.Equal(t, "req", ids.fresh("req"), "a free name is kept")
	assert.Equal(t, "req2", ids.fresh("req"))
}

// One set of taken names serves the locals, the parameters and the imports of a file: a
// local named like a package-level name, or an import named like a package-level name, a
// local, a generated parameter or another import, gets a fresh name, the same on every run.
func TestLocalsAndImportsTakeFreshNames(t *testing.T) {
	const path GoImportPath = "example.com/hub"
	var (
		aIn     GoImportPath = "example.com/a/in"
		bIn     GoImportPath = "example.com/b/in"
		replies GoImportPath = "example.com/reply"
		factory GoImportPath = "example.com/newhub"
	)
	hub := &Interface{
		Name:     "Hub",
		Kind:     sdk.KindUser,
		TypeName: "hub.Hub",
		Methods: []*Method{
			{Name: "Join", Request: &Message{GoIdent: aIn.Ident("Ping")}, Reply: &Message{GoIdent: replies.Ident("Pong")}},
			{Name: "Back", Send: true, Request: &Message{GoIdent: bIn.Ident("Ping")}},
			{Name: "Make", Request: &Message{GoIdent: factory.Ident("Order")}, Reply: &Message{GoIdent: path.Ident("Done")}},
		},
	}
	p := &Package{
		Name: "hub",
		Path: path,
		PackageNames: map[GoImportPath]GoPackageName{
			path: "hub", aIn: "in", bIn: "in", replies: "reply", factory: "newHub",
		},
		Files:    []*File{{Source: "/x/hub.go", Out: "/x/hub_zlink.go", Spots: []*Interface{hub}}},
		Declared: []string{"Done", "Hub", "ctx", "ctx2", "in", "sdk"},
	}
	out, err := emitFile(p, p.Files[0])
	require.NoError(t, err)
	_, err = parser.ParseFile(token.NewFileSet(), "hub_zlink.go", out, 0)
	require.NoError(t, err, "%s", out)
	again, err := emitFile(p, p.Files[0])
	require.NoError(t, err)
	assert.Equal(t, string(out), string(again), "two renderings differ")

	got := string(out)
	for _, want := range []string{
		// Imports: sdk is declared; in is a local (and declared); in2 and in3 are the two
		// packages named in; reply is a local; newHub is RegisterHub's factory.
		"\tin2 \"example.com/a/in\"\n",
		"\tin3 \"example.com/b/in\"\n",
		"\tnewHub2 \"example.com/newhub\"\n",
		"\treply2 \"example.com/reply\"\n",
		"\tsdk2 \"github.com/zlink-go/zlink/sdk\"\n",
		// Locals: ctx, ctx2 and in are declared, but no generated body refers to them, so the
		// locals that shadow them keep their names.
		"Invoke: func(impl any, ctx context.Context, req proto.Message) (proto.Message, error) {",
		"in, ok := req.(*in2.Ping)",
		"func RegisterHub(r sdk2.Registrar, newHub func(sdk2.SpotContext) (Hub, error), opts ...sdk2.TypeOption) error {",
		"func (r HubRef) Join(ctx context.Context, req *in2.Ping, opts ...sdk2.CallOption) (*reply2.Pong, error) {",
		"reply, ok := out.(*reply2.Pong)",
		"func (r HubRef) Back(ctx context.Context, msg *in3.Ping, opts ...sdk2.CallOption) error {",
		"func (r HubRef) Make(ctx context.Context, req *newHub2.Order, opts ...sdk2.CallOption) (*Done, error) {",
		// Error messages name a message by the name its package declares.
		`"%w: %s takes *in.Ping, got %T"`,
		`"%w: %s replied %T, want *hub.Done"`,
	} {
		assert.Contains(t, got, want)
	}
}

func TestALocalAvoidsOnlyThePackageNamesTheGeneratedCodeRefersTo(t *testing.T) {
	const path GoImportPath = "example.com/hub"
	hub := &Interface{
		Name:     "Hub",
		Kind:     sdk.KindUser,
		TypeName: "hub.Hub",
		Methods:  []*Method{{Name: "Join", Request: &Message{GoIdent: path.Ident("req")}, Reply: &Message{GoIdent: path.Ident("out")}}},
	}
	p := &Package{
		Name:         "hub",
		Path:         path,
		PackageNames: map[GoImportPath]GoPackageName{path: "hub"},
		Files:        []*File{{Source: "/x/hub.go", Out: "/x/hub_zlink.go", Spots: []*Interface{hub}}},
		Declared:     []string{"Hub", "ctx", "impl", "out", "req"},
	}
	out, err := emitFile(p, p.Files[0])
	require.NoError(t, err)
	got := string(out)
	for _, want := range []string{
		// req and out are message types the bodies name: the locals of those names are renamed.
		// ctx and impl are declared too, but no body refers to them.
		"Invoke: func(impl any, ctx context.Context, req2 proto.Message) (proto.Message, error) {",
		"in, ok := req2.(*req)",
		"out2, err := s.Join(ctx, in)",
		"func (r HubRef) Join(ctx context.Context, req2 *req, opts ...sdk.CallOption) (*out, error) {",
	} {
		assert.Contains(t, got, want)
	}
}
