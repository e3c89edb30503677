package transport_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/zlink-go/zlink/rt/internal/wire"
)

// rawStream opens a mesh stream to addr as node from would, but outside any Transport, so a
// test controls every batch and header; headers are extra metadata pairs. The stream ends
// after 5 s at the latest.
func rawStream(t *testing.T, addr, from string, headers ...string) grpc.ClientStream {
	t.Helper()
	return rawStreamWith(t, addr, from, rawConn{}, headers...)
}

// rawConn is how rawStreamWith connects: from the loopback address local ("" for any), over
// TLS when tls is set.
type rawConn struct {
	local string
	tls   *tls.Config
}

// rawStreamWith is rawStream over a connection made as c says.
func rawStreamWith(t *testing.T, addr, from string, c rawConn, headers ...string) grpc.ClientStream {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if c.local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.local)}
	}
	creds := insecure.NewCredentials()
	if c.tls != nil {
		creds = credentials.NewTLS(c.tls)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	t.Cleanup(cancel)
	sctx = metadata.AppendToOutgoingContext(sctx, append([]string{"zlink-node", from}, headers...)...)
	s, err := conn.NewStream(sctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/zlink.wire.v1.Mesh/Stream")
	require.NoError(t, err)
	return s
}

// sendRequests sends reqs in one batch on s.
func sendRequests(t *testing.T, s grpc.ClientStream, reqs ...*wire.Request) {
	t.Helper()
	b := &wire.Batch{}
	for _, r := range reqs {
		b.Envelopes = append(b.Envelopes, &wire.Envelope{Request: r})
	}
	require.NoError(t, s.SendMsg(b))
}

// recvReply receives from s until the reply to call id arrives, within 10 s.
func recvReply(t *testing.T, s grpc.ClientStream, id uint64) *wire.Reply {
	t.Helper()
	return replyWithin(t, s, id, 10*time.Second)
}

// replyWithin receives from s until the reply to call id arrives, failing unless it comes
// within d.
func replyWithin(t *testing.T, s grpc.ClientStream, id uint64, d time.Duration) *wire.Reply {
	t.Helper()
	got := make(chan *wire.Reply, 1)
	go func() {
		for {
			var b wire.Batch
			if s.RecvMsg(&b) != nil {
				close(got)
				return
			}
			for _, env := range b.Envelopes {
				if r := env.GetReply(); r != nil && r.CallId == id {
					got <- r
					return
				}
			}
		}
	}()
	select {
	case r, ok := <-got:
		require.True(t, ok, "the stream ended before the reply to call %d", id)
		return r
	case <-time.After(d):
		require.FailNow(t, "no reply in time", "call %d within %v", id, d)
		return nil
	}
}

// proxy forwards TCP connections to a target; cut drops the connections it carries, as a
// network fault would, and new ones are accepted again at once.
type proxy struct {
	lis    net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{lis: lis, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.lis.Addr().String() }

func (p *proxy) accept() {
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = in.Close()
			_ = out.Close()
			return
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Go(func() { pipe(in, out) })
		p.wg.Go(func() { pipe(out, in) })
	}
}

// cut closes every connection the proxy carries.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.lis.Close()
	p.cut()
	p.wg.Wait()
}
