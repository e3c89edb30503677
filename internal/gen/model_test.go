package gen

import (
	"context"
	"go/token"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadModel loads the package in dir (relative to this package's directory), builds its model
// and validates it, and fails on any problem.
func loadModel(t *testing.T, dir string) *Package {
	t.Helper()
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)
	pkgs, fset, _, err := load(context.Background(), Config{Dir: abs}, []string{"."})
	require.NoError(t, err)
	require.Len(t, pkgs, 1)
	errs := &errorCollector{}
	m := newBuilder(fset, errs, pkgs).pkg(pkgs[0])
	v := &validator{fset: fset, errs: errs, rel: token.Position.String}
	v.pkg(m)
	require.Empty(t, errs.errs)
	return m
}

func TestGoIdent(t *testing.T) {
	id := GoImportPath("github.com/zlink-go/zlink/sdk").Ident("Client")
	assert.Equal(t, GoIdent{GoName: "Client", GoImportPath: "github.com/zlink-go/zlink/sdk"}, id)
	assert.Equal(t, `"github.com/zlink-go/zlink/sdk".Client`, id.String())
}

// Messages of two packages that declare the same name are told apart by their import paths;
// the model knows the name each declares, whatever the input's imports call them.
func TestMessagesAreIdentifiedByImportPath(t *testing.T) {
	const (
		pb    GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/pb"
		altpb GoImportPath = "github.com/zlink-go/zlink/gen_test/testdata/alt/pb"
	)
	m := loadModel(t, "../../gen_test/testdata/imported_messages/input")
	assert.Equal(t, GoImportPath("github.com/zlink-go/zlink/gen_test/testdata/imported_messages/input"), m.Path)
	assert.Equal(t, GoPackageName("relay"), m.Name)
	require.Len(t, m.Files, 1)
	require.Len(t, m.Files[0].Spots, 1)
	methods := m.Files[0].Spots[0].Methods
	require.Len(t, methods, 2)
	assert.Equal(t, pb.Ident("Ping"), methods[0].Request.GoIdent)
	assert.Equal(t, altpb.Ident("Pong"), methods[0].Reply.GoIdent)
	assert.Equal(t, altpb.Ident("Ping"), methods[1].Request.GoIdent)
	assert.Equal(t, pb.Ident("Pong"), methods[1].Reply.GoIdent)
	assert.Equal(t, map[GoImportPath]GoPackageName{m.Path: "relay", pb: "pb", altpb: "pb"}, m.PackageNames)
}
