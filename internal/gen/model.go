package gen

import (
	"fmt"
	"go/token"
	"go/types"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// Package is one loaded Go package and the Spot and Actor types and channels declared in it.
type Package struct {
	// Types is the package's go/types identity, for building and validating the model; the
	// emitter works from the model alone.
	Types *types.Package
	// Name and Path are the package's name and import path.
	Name GoPackageName
	Path GoImportPath
	// PackageNames are the names that the packages whose identifiers generated code refers to
	// declare, by import path: the package itself, and those of the messages (set by
	// validation).
	PackageNames map[GoImportPath]GoPackageName
	// Files are the input files that declare Spot or Actor types or channels, in source order.
	Files []*File
	// Generated are the *_zlink.go files that zlinkgen made earlier, by absolute path.
	Generated []string
	// Declared are the package-level names the package declares, sorted (its earlier
	// generated files left out), Unseen included: names that the file's import names must
	// avoid, as an import cannot share a name with any package-level declaration.
	Declared []string
	// Unseen are the package-level declarations of the package's files that the type checker
	// did not see: its _test.go files and those that build constraints leave out, so that the
	// output is the same for every GOOS, GOARCH and set of tags, and compiles with the tests.
	// They are read only for a package that has input files.
	Unseen []Decl
}

// Decl is one package-level declaration that only the syntax tells of.
type Decl struct {
	// Name is the declared name.
	Name string
	// Kind is "func", "var", "const" or "type".
	Kind string
	// Pos is where the name is declared.
	Pos token.Position
	// Predeclared is set for an alias that the syntax shows to be the predeclared type of its
	// name, type any = interface{}: the name then means what it means in the universe.
	Predeclared bool
}

// File is one input file that declares Spot or Actor types or channels, and the file generated
// for it.
type File struct {
	// Source is the input file's absolute path (room.go).
	Source string
	// Out is the output file's absolute path (room_zlink.go).
	Out string
	// BuildConstraint is the input's //go:build line, copied to the output, or "".
	BuildConstraint string
	// Spots are the annotated interfaces of the file, Spot and Actor types and channels, in
	// source order.
	Spots []*Interface
}

// Interface is one annotated interface: a Spot type, an Actor type (Kind is sdk.KindActor), or
// a channel (Channel is set, Kind is sdk.KindInvalid).
type Interface struct {
	// Obj is the interface's go/types identity.
	Obj *types.TypeName
	// Name is the Go name of the interface (Room).
	Name string
	// Pos is where the interface is declared.
	Pos token.Position
	// DirectivePos is where its //zlink:spot, //zlink:actor, //zlink:server or //zlink:fanout
	// directive is.
	DirectivePos token.Position
	// Doc is the interface's doc comment, directives removed.
	Doc string
	// Kind is the Spot kind (A1), or sdk.KindActor for an Actor type; sdk.KindInvalid for a
	// channel.
	Kind sdk.SpotKind
	// Channel is the topology of a channel: ClientServer for //zlink:server, Fanout for
	// //zlink:fanout. It is 0 for a Spot or Actor type.
	Channel sdk.ChannelKind
	// TypeName is the stable name: the type name of a Spot or Actor type (name= or
	// <package name>.<Interface>), the channel name of a channel (channel= or
	// <package name>.<Interface>).
	TypeName string
	// Idle is the idle= option of an Instance type, or 0.
	Idle time.Duration
	// Methods are the interface's methods, embedded interfaces flattened, in declaration order.
	Methods []*Method
}

// Method is one method of a Spot, Actor or channel interface.
type Method struct {
	// Obj is the method's go/types identity.
	Obj *types.Func
	// Name is the method's name, which is also its stable name in the dispatch table.
	Name string
	// Pos is where the method is declared.
	Pos token.Position
	// Via are the embeddings that bring the method into the interface, outermost first (the
	// first is in the interface's own declaration); none for a method the interface declares.
	// A method declared where the user cannot edit it (another module, the standard library)
	// is reported at the last of them that the user can.
	Via []token.Position
	// Doc is the method's doc comment, directives removed.
	Doc string
	// Send is set by a //zlink:send directive: the method is one-way. Every method of a Fanout
	// channel is one-way, so it is set on each of them, with the directive or without.
	Send bool
	// Inferred is set when the method comes from an interface whose source is not at hand:
	// Send then follows from the shape, since the directive cannot be read.
	Inferred bool
	// Params and Results are the signature's parameters and results.
	Params, Results []*Param
	// Variadic reports a variadic last parameter.
	Variadic bool

	// Request and Reply are set by validation: the message types. Reply is nil for a one-way
	// method.
	Request, Reply *Message
}

// Param is one parameter or result of a method.
type Param struct {
	// Name is the parameter's name in the source, or "".
	Name string
	// Type is its type.
	Type types.Type
	// Pos is where it is declared (the method's position when unknown).
	Pos token.Position
	// TypePos is where its type is decided: the type argument of the instance when the type
	// is a type parameter of a generic alias, or a pointer to one; else Pos. A problem of the
	// type is reported there, one of the method's shape at Pos.
	TypePos token.Position
}

// Message is a protobuf message type T, used as *T.
type Message struct {
	// GoIdent is the Go type: its name and the import path of the package that declares it.
	GoIdent GoIdent
}

// IsChannel reports whether s is a channel (//zlink:server or //zlink:fanout) rather than a
// Spot or Actor type.
func (s *Interface) IsChannel() bool { return s.Channel != 0 }

// GoImportPath is the import path of a Go package: "github.com/zlink-go/zlink/sdk".
type GoImportPath string

// Ident returns the identifier name of the package at path p.
func (p GoImportPath) Ident(name string) GoIdent { return GoIdent{GoName: name, GoImportPath: p} }

// GoPackageName is the name a Go package declares in its package clause: "sdk". An import
// may give the package another name in one file; the model records the declared one.
type GoPackageName string

// GoIdent is a package-level Go identifier and the import path of the package that declares
// it. How generated code spells it depends on the file: unqualified in the package itself,
// else qualified by the name that the file's import of the package takes.
type GoIdent struct {
	GoName       string
	GoImportPath GoImportPath
}

// String renders the identity, not generated code: "github.com/zlink-go/zlink/sdk".Client.
func (id GoIdent) String() string { return fmt.Sprintf("%q.%s", id.GoImportPath, id.GoName) }
