// Package gen is zlinkgen, the ZLink code generator, as a library.
//
// It turns Go interfaces annotated with //zlink: directives into typed references, create and
// create-intent calls, registration functions and dispatch tables that run on the ZLink
// runtime (see docs/DESIGN.md §3). It works in four steps, each in its own file:
//
//	load      (load.go)      go/packages loads and type-checks the packages
//	model     (model.go)     the annotated interfaces become Package / Interface / Method / Param,
//	                         each with its go/types identity, position and doc comment
//	validate  (validate.go)  method shapes, protobuf messages, names and directives are checked;
//	                         every problem is collected, none stops the others
//	emit      (emit_*.go)    jennifer renders one file per input file, from the model alone
//
// Generate runs these steps and returns one Result per output file; Write (write.go) puts them
// on disk, rewriting a file only when its bytes change, and Check compares them with the disk.
// Nothing is written when any error exists.
//
// # Directives
//
//	//zlink:spot entry|user|instance [name=<stable type name>] [idle=<duration>]
//
// on the doc comment of an interface type makes it a Spot type. name defaults to
// <package name>.<Interface>; idle (Instance only, a positive time.ParseDuration value) is the
// type's idle timeout.
//
//	//zlink:actor [name=<stable type name>]
//
// on the doc comment of an interface type makes it an Actor type (DESIGN §6): XOf, SpawnX and
// MoveX instead of the Spot kinds' constructors. It takes no kind and no idle=, since an Actor
// is never idle-evicted on its own.
//
//	//zlink:send
//
// on the doc comment of a method makes it one-way. Unknown directives and options are errors.
// Directive lines are not copied into the generated doc comments.
//
// # Method shapes
//
//	M(ctx context.Context, req *T) (*R, error)   // request/reply
//	M(ctx context.Context, msg *T) error         // one-way, with //zlink:send
//
// T and R are protobuf messages (they implement google.golang.org/protobuf's proto.Message).
// Embedded interfaces, of the same package or imported, are flattened in declaration order.
//
// # Output files
//
// Output goes next to the input: an input file room.go that declares annotated interfaces
// gets room_zlink.go in the same directory, holding the code for every Spot and Actor type
// declared in room.go. A *_zlink.go file that zlinkgen made and whose input no longer declares
// such a type is removed. A *_zlink.go file that zlinkgen did not make is never overwritten.
//
// Errors are reported all at once, each as
//
//	room.go:12:2: zlinkgen: Room.Join: the request must be a pointer to a protobuf message, got string
package gen
