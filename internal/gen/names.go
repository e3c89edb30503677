package gen

import "github.com/zlink-go/zlink/sdk"

// names are the package-level names generated for one Spot, Actor or channel interface. They
// are the contract that the examples and docs use (DESIGN §3, §6).
type names struct {
	TypeName  string // RoomTypeName, MatchmakerChannelName: the stable name constant
	Desc      string // Room_SpotDesc, Pawn_ActorDesc, Matchmaker_ChannelDesc: the descriptor and dispatch table
	Register  string // RegisterRoom (Spot, Actor), RegisterMatchmakerServer (ClientServer)
	Factory   string // newRoom: RegisterRoom's factory parameter (Spot, Actor)
	Ref       string // RoomRef (every kind), MatchmakerClientRef, ResultsPublisherRef (channels)
	Of        string // RoomOf / PlayerOf / PawnOf (Instance, User, Actor)
	Intent    string // RoomIntent (Instance)
	Open      string // OpenRoom (Instance)
	Create    string // CreatePlayer (User)
	On        string // LobbyOn (Entry)
	Local     string // LocalLobby (Entry)
	Spawn     string // SpawnPawn (Actor)
	Move      string // MovePawn (Actor)
	Client    string // MatchmakerClient (ClientServer)
	Publisher string // ResultsPublisher (Fanout)
	Subscribe string // SubscribeResults (Fanout)
}

func namesOf(s *Interface) names {
	switch s.Channel {
	case sdk.ChannelClientServer:
		return names{
			TypeName: s.Name + "ChannelName",
			Desc:     s.Name + "_ChannelDesc",
			Register: "Register" + s.Name + "Server",
			Ref:      s.Name + "ClientRef",
			Client:   s.Name + "Client",
		}
	case sdk.ChannelFanout:
		return names{
			TypeName:  s.Name + "ChannelName",
			Desc:      s.Name + "_ChannelDesc",
			Ref:       s.Name + "PublisherRef",
			Publisher: s.Name + "Publisher",
			Subscribe: "Subscribe" + s.Name,
		}
	}
	n := names{
		TypeName: s.Name + "TypeName",
		Desc:     s.Name + "_SpotDesc",
		Register: "Register" + s.Name,
		Factory:  "new" + s.Name,
		Ref:      s.Name + "Ref",
	}
	switch s.Kind {
	case sdk.KindInstance:
		n.Of, n.Intent, n.Open = s.Name+"Of", s.Name+"Intent", "Open"+s.Name
	case sdk.KindUser:
		n.Of, n.Create = s.Name+"Of", "Create"+s.Name
	case sdk.KindEntry:
		n.On, n.Local = s.Name+"On", "Local"+s.Name
	case sdk.KindActor:
		n.Desc = s.Name + "_ActorDesc"
		n.Of, n.Spawn, n.Move = s.Name+"Of", "Spawn"+s.Name, "Move"+s.Name
	}
	return n
}

// fullMethodConst names the full method name constant of method m of s.
func fullMethodConst(s *Interface, m *Method) string {
	return s.Name + "_" + m.Name + "_FullMethodName"
}

// topLevel returns every package-level name generated for s, in a fixed order.
func topLevel(s *Interface) []string {
	n := namesOf(s)
	var out []string
	for _, v := range []string{n.TypeName, n.Desc, n.Register, n.Ref, n.Of, n.Intent, n.Open, n.Create, n.On, n.Local, n.Spawn, n.Move,
		n.Client, n.Publisher, n.Subscribe} {
		if v != "" {
			out = append(out, v)
		}
	}
	for _, m := range s.Methods {
		out = append(out, fullMethodConst(s, m))
	}
	return out
}

// refMethods are the methods that the generated reference types of s have besides the
// interface's own; an interface method of one of these names would collide. A channel's
// reference has none.
func refMethods(s *Interface) []string {
	if s.IsChannel() {
		return nil
	}
	switch s.Kind {
	case sdk.KindInstance:
		return []string{"ID", "Close", "Ref"}
	case sdk.KindUser, sdk.KindActor:
		return []string{"ID", "Close"}
	case sdk.KindEntry:
		return []string{"Node"}
	}
	return nil
}

// objectWord is what s declares, for messages: "Spot", "Actor" or "channel".
func objectWord(s *Interface) string {
	if s.IsChannel() {
		return "channel"
	}
	if s.Kind == sdk.KindActor {
		return "Actor"
	}
	return "Spot"
}
