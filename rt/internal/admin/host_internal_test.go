package admin

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHostFormsOfTheLoopbackRules(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost.:8080": true, "LOCALHOST:8080": true, "a.localhost:1": true,
		"[::1]": false, "": false, "localhost.evil.com": false, "evillocalhost": false, "localhost..": false,
	} {
		assert.Equal(t, want, loopbackName(hostName(host)), "loopbackName(%q)", host)
	}
	for host, want := range map[string]bool{
		"[::1]": true, "::1": true, "[::1]:8080": true, "127.0.0.1:80": true, "localhost": true,
		"": false, "10.0.0.5:8080": false, "localhost.evil.com": false,
	} {
		assert.Equal(t, want, loopbackHost(host), "loopbackHost(%q)", host)
	}
	// A profile through a tunnel needs a connection from the loopback interface: any client on
	// the network can name the server as it likes.
	for addr, want := range map[string]bool{"127.0.0.1:5000": true, "[::1]:5000": true, "10.0.0.7:5000": false, "": false, "garbage": false} {
		assert.Equal(t, want, loopbackPeer(addr), "loopbackPeer(%q)", addr)
	}
}
