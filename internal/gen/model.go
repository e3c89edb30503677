package gen

import (
	"go/token"
	"go/types"
	"time"

	"github.com/zlink-go/zlink/sdk"
)

// Package is one loaded Go package and the Spot types declared in it.
type Package struct {
	// Types is the package's go/types identity.
	Types *types.Package
	// Name and Path are the package's name and import path.
	Name, Path string
	// Files are the input files that declare Spot types, in source order.
	Files []*File
	// Generated are the *_zlink.go files that zlinkgen made earlier, by absolute path.
	Generated []string
}

// File is one input file that declares Spot types, and the file generated for it.
type File struct {
	// Source is the input file's absolute path (room.go).
	Source string
	// Out is the output file's absolute path (room_zlink.go).
	Out string
	// BuildConstraint is the input's //go:build line, copied to the output, or "".
	BuildConstraint string
	// Spots are the annotated interfaces of the file, in source order.
	Spots []*Interface
}

// Interface is one annotated interface: a Spot type.
type Interface struct {
	// Obj is the interface's go/types identity.
	Obj *types.TypeName
	// Name is the Go name of the interface (Room).
	Name string
	// Pos is where the interface is declared.
	Pos token.Position
	// DirectivePos is where its //zlink:spot directive is.
	DirectivePos token.Position
	// Doc is the interface's doc comment, directives removed.
	Doc string
	// Kind is the Spot kind (A1).
	Kind sdk.SpotKind
	// TypeName is the stable type name (name= or <package name>.<Interface>).
	TypeName string
	// Idle is the idle= option of an Instance type, or 0.
	Idle time.Duration
	// Methods are the interface's methods, embedded interfaces flattened, in declaration order.
	Methods []*Method
}

// Method is one method of a Spot interface.
type Method struct {
	// Obj is the method's go/types identity.
	Obj *types.Func
	// Name is the method's name, which is also its stable name in the dispatch table.
	Name string
	// Pos is where the method is declared.
	Pos token.Position
	// Doc is the method's doc comment, directives removed.
	Doc string
	// Send is set by a //zlink:send directive: the method is one-way.
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
}

// Message is a protobuf message type T, used as *T.
type Message struct {
	// PkgPath and PkgName are the import path and name of the package that declares it.
	PkgPath, PkgName string
	// Name is the Go type name.
	Name string
}
