// Package gen is zlinkgen, the ZLink code generator, as a library.
//
// It turns Go interfaces annotated with //zlink: directives into typed references, create and
// create-intent calls, registration functions, channel clients, publishers and subscriptions,
// and dispatch tables that run on the ZLink runtime (see docs/DESIGN.md §3, §6). It works in
// four steps, each in its own file:
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
//	//zlink:server [channel=<channel name>]
//
// on the doc comment of an interface type X makes it a ClientServer channel (DESIGN §6). Its
// methods have the shapes of a Spot type's. Generated: XChannelName, X_ChannelDesc (an
// sdk.ChannelDesc of kind sdk.ChannelClientServer), RegisterXServer(r, impl, opts...) that makes
// impl a server of the channel on a node, and XClient(c), an XClientRef whose calls go to one
// Ready server of the channel, chosen by weight (sticky with the sdk.Key call option).
//
//	//zlink:fanout [channel=<channel name>]
//
// on the doc comment of an interface type X makes it a Fanout channel. Its methods are all
// one-way, M(ctx context.Context, msg *T) error, with //zlink:send or without; a method that
// returns a reply is an error. Generated: XChannelName, X_ChannelDesc (kind sdk.ChannelFanout),
// SubscribeX(r, handler, opts...) that makes handler a subscriber of the channel on a node, and
// XPublisher(c), an XPublisherRef whose methods publish to every subscriber of the channel on
// every node, at most once, in publish order per publisher.
//
// channel names the channel; it defaults to <package name>.<Interface> and follows the rules
// of name=. The channel names of one package are unique; they are apart from stable type
// names, which may repeat them. A channel takes no other option, and an interface is one of a
// Spot type, an Actor type, a ClientServer channel or a Fanout channel. Spot and Actor types
// and channels may share a package and a file.
//
//	//zlink:send
//
// on the doc comment of a method makes it one-way. Unknown directives and options are errors.
// Directive lines are not copied into the generated doc comments.
//
// # Method shapes
//
//	M(ctx context.Context, req *T) (*R, error)   // request/reply (not on a Fanout channel)
//	M(ctx context.Context, msg *T) error         // one-way, with //zlink:send (optional on a Fanout channel)
//
// T and R are protobuf messages (they implement google.golang.org/protobuf's proto.Message)
// that the interface's package can name: an alias of an unexported type of another package,
// or a type of an internal package it may not import, is an error. Embedded interfaces, of
// the same package or imported, are flattened in declaration order.
//
// # Output files
//
// Output goes next to the input: an input file room.go that declares annotated interfaces
// gets room_zlink.go in the same directory, holding the code for every Spot and Actor type and
// every channel declared in room.go. A *_zlink.go file that zlinkgen made and whose input no
// longer declares any of them is removed. A *_zlink.go file that zlinkgen did not make is never
// overwritten. An output builds exactly when its input does: the input's build constraint
// (//go:build or // +build), the GOOS and GOARCH of its file name and cgo (when it imports "C")
// make the output's //go:build line.
//
// Generated package-level names must not collide with any package-level name of the package,
// in any of its files: its _test.go files and those for other platforms or tags included, so
// that the output is the same whatever GOOS, GOARCH and tags zlinkgen runs with; a file that
// no build includes (//go:build ignore) does not count. A package that redeclares a
// predeclared identifier the generated code uses (nil, string, error, ...) is an error, unless
// it declares a type alias of the predeclared type itself (type any = interface{}), which
// changes nothing the generated code means.
//
// Errors are reported all at once, each as
//
//	room.go:12:2: zlinkgen: Room.Join: the request must be a pointer to a protobuf message, got string
package gen
