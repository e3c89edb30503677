package rt_test

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/internal/browsertest"
	"github.com/zlink-go/zlink/sdk"
)

// cutProxy forwards TCP connections to target until it is paused, which cuts the ones open
// and refuses new ones until it resumes: a network that drops the browser's stream.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	paused bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		paused := p.paused
		if !paused {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if paused {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *cutProxy) forward(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, up)
		p.mu.Unlock()
		up.Close()
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, c)
		up.Close()
	})
	_, _ = io.Copy(c, up)
	c.Close()
	wg.Wait()
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) pause(paused bool) {
	p.mu.Lock()
	p.paused = paused
	p.mu.Unlock()
	if paused {
		p.cut()
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// The dashboard in a real headless Chromium: the page of node-1 of a running two-node mesh
// shows its state badge (Serving) and node-2 as a Ready peer, and both nodes in the mesh view;
// when its stream is cut it says so and reconnects by itself; when node-2 shuts down the page
// shows it without a reload (H1: it is another observer of the same statuses). The
// screenshots are saved under the test's temp dir.
func TestAdminDashboardInABrowser(t *testing.T) {
	a, b := adminPair(t, nil)
	bctx := browsertest.Chromium(t)
	proxy := newCutProxy(t, a.AdminURL()[len("http://"):])

	// Some traffic, for the charts.
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_, _ = a.Call(ctx, sdk.InstanceIntent("test.Counter", fmt.Sprintf("c%d", i%40)), "Add", wrapperspb.Int64(1))
		}
	})
	defer func() {
		close(stop)
		traffic.Wait()
	}()

	browsertest.Navigate(t, bctx, proxy.url()+"/")
	browsertest.WaitFor(t, bctx, "the state badge", `document.querySelector('#state-badge').dataset.state === 'Serving' && document.querySelector('#state-badge').textContent === 'Serving'`)
	browsertest.WaitFor(t, bctx, "node-2 a Ready peer", `!!document.querySelector('#peers tr[data-node="node-2"][data-state="Ready"]')`)
	browsertest.WaitFor(t, bctx, "both nodes in the mesh view", `!!document.querySelector('#mesh-nodes tr[data-node="node-1"][data-state="Serving"]') && !!document.querySelector('#mesh-nodes tr[data-node="node-2"][data-state="Serving"]')`)
	browsertest.WaitFor(t, bctx, "charts with points", `Number(document.querySelector('#chart-calls').dataset.points || 0) >= 3`)
	// Marks this page: a reload would lose it.
	browsertest.Eval(t, bctx, `window.sameLoad = true`)

	proxy.pause(true)
	browsertest.WaitFor(t, bctx, "the page to notice the cut stream", `document.querySelector('#conn').dataset.live === 'false'`)
	proxy.pause(false)
	browsertest.WaitFor(t, bctx, "the stream to reconnect by itself", `document.querySelector('#conn').dataset.live === 'true'`)

	dir := t.TempDir()
	browsertest.Screenshot(t, bctx, filepath.Join(dir, "dashboard.png"))

	_, err := b.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	browsertest.WaitFor(t, bctx, "node-2 no longer a Ready peer", `!document.querySelector('#peers tr[data-node="node-2"][data-state="Ready"]')`)
	browsertest.WaitFor(t, bctx, "the mesh view without node-2 serving", `!document.querySelector('#mesh-nodes tr[data-node="node-2"][data-state="Serving"]')`)
	browsertest.WaitFor(t, bctx, "the same page, never reloaded", `window.sameLoad === true`)
	browsertest.WaitFor(t, bctx, "node-1 still serving", `document.querySelector('#state-badge').dataset.state === 'Serving'`)
	browsertest.Screenshot(t, bctx, filepath.Join(dir, "after-shutdown.png"))
}
