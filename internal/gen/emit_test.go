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

// The emitter reads the model and nothing else: from a model built by hand, without the
// go/types identities that loading sets, it renders the golden output of the case, the names
// it must avoid included.
func TestEmitterWorksFromTheModelAlone(t *testing.T) {
	for name, p := range map[string]*Package{"instance": instanceModel(), "name_collisions": nameCollisionsModel()} {
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
