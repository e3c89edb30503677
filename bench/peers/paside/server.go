package paside

import (
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

// ServerActorName is the name of the echo actor that the server process spawns.
const ServerActorName = "echo"

// Server is the remote side of the two-process workload: an actor system with remote on a
// free loopback port and one named echo actor.
type Server struct {
	sys    *actor.ActorSystem
	remote *remote.Remote
}

// StartServer starts the server.
func StartServer() (*Server, error) {
	sys := NewSystem()
	r := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	r.Start()
	if _, err := sys.Root.SpawnNamed(RequestProps(), ServerActorName); err != nil {
		r.Shutdown(false)
		sys.Shutdown()
		return nil, err
	}
	return &Server{sys: sys, remote: r}, nil
}

// Address is the host:port clients reach the server at.
func (s *Server) Address() string { return s.sys.Address() }

// Stop stops the server.
func (s *Server) Stop() {
	s.remote.Shutdown(false)
	s.sys.Shutdown()
}
