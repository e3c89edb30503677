package rt_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/zlink-go/zlink/examples/chat/chat"
	"github.com/zlink-go/zlink/rt"
	"github.com/zlink-go/zlink/sdk"
)

// ExampleStart starts a node on an embedded etcd (the default when Config.EtcdEndpoints is
// empty) that serves the chat example's Spot types, whose code zlinkgen generated, and calls
// them through the node, which is an sdk.Client.
func ExampleStart() {
	ctx := context.Background()
	cfg := rt.DefaultConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Register = func(r sdk.Registrar) error {
		return errors.Join(
			chat.RegisterLobby(r, chat.NewLobby),
			chat.RegisterUser(r, chat.NewUser),
			chat.RegisterRoom(r, chat.NewRoom),
		)
	}
	h, err := rt.Start(ctx, cfg)
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer h.Close()

	// A plain reference never creates: a call to a room that does not exist fails with
	// sdk.ErrNotFound.
	_, err = chat.RoomOf(h, "general").Join(ctx, &chat.JoinRequest{User: "ana"})
	fmt.Println("plain call to a missing room, not found:", errors.Is(err, sdk.ErrNotFound))

	// A reference from OpenRoom carries create-intent: its first call creates the room.
	reply, err := chat.OpenRoom(h, "general").Join(ctx, &chat.JoinRequest{User: "ana"})
	if err != nil {
		fmt.Println("join:", err)
		return
	}
	fmt.Println("members after the intent call:", reply.GetMembers())

	// Now that the room exists, the plain reference reaches the same one.
	reply, err = chat.RoomOf(h, "general").Join(ctx, &chat.JoinRequest{User: "ben"})
	if err != nil {
		fmt.Println("join:", err)
		return
	}
	fmt.Println("members after the plain call:", reply.GetMembers())

	// A User Spot is created explicitly, once: creating it again fails with
	// sdk.ErrAlreadyExists.
	if _, err := chat.CreateUser(ctx, h, "ana"); err != nil {
		fmt.Println("create:", err)
		return
	}
	_, err = chat.CreateUser(ctx, h, "ana")
	fmt.Println("second create, already exists:", errors.Is(err, sdk.ErrAlreadyExists))

	// Output:
	// plain call to a missing room, not found: true
	// members after the intent call: [ana]
	// members after the plain call: [ana ben]
	// second create, already exists: true
}
