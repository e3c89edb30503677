package rt_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/zlink-go/zlink/sdk"
)

// browserOptionalEnv, when set, lets the browser tests skip on a machine without Chromium.
// CI never sets it: there a missing browser fails the test.
const browserOptionalEnv = "ZLINK_BROWSER_OPTIONAL"

// headlessChromium starts a headless Chromium (Debian's chromium package) for the test and
// returns a browser context; everything ends with the test.
func headlessChromium(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv(browserOptionalEnv) != "" {
			t.Skipf("no Chromium on this machine, and %s is set", browserOptionalEnv)
		}
		t.Fatalf("no Chromium on this machine: install Debian's chromium package (apt-get install -y chromium), or set %s=1 to skip the browser tests", browserOptionalEnv)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1360, 1000),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser process to end
	})
	// The first run starts the browser; its context has no timeout, which would end it.
	require.NoError(t, chromedp.Do(bctx), "start %s", path)
	return bctx
}

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

// inBrowser runs the actions within a minute.
func inBrowser(bctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(bctx, time.Minute)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// waitFor polls a JavaScript condition in the page until it holds.
func waitFor(t *testing.T, bctx context.Context, what, expr string) {
	t.Helper()
	ok, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second)))
	require.NoError(t, err, "waiting for %s: %s", what, expr)
	require.True(t, ok, what)
}

// The dashboard in a real headless Chromium: the page of node-1 of a running two-node mesh
// shows its state badge (Serving) and node-2 as a Ready peer, and both nodes in the mesh view;
// when its stream is cut it says so and reconnects by itself; when node-2 shuts down the page
// shows it without a reload (H1: it is another observer of the same statuses). The
// screenshot is saved under the test's temp dir (and where ZLINK_DASHBOARD_PNG says).
func TestAdminDashboardInABrowser(t *testing.T) {
	a, b := adminPair(t, nil)
	bctx := headlessChromium(t)
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

	require.NoError(t, inBrowser(bctx, chromedp.Navigate(proxy.url()+"/")))
	waitFor(t, bctx, "the state badge", `document.querySelector('#state-badge').dataset.state === 'Serving' && document.querySelector('#state-badge').textContent === 'Serving'`)
	waitFor(t, bctx, "node-2 a Ready peer", `!!document.querySelector('#peers tr[data-node="node-2"][data-state="Ready"]')`)
	waitFor(t, bctx, "both nodes in the mesh view", `!!document.querySelector('#mesh-nodes tr[data-node="node-1"][data-state="Serving"]') && !!document.querySelector('#mesh-nodes tr[data-node="node-2"][data-state="Serving"]')`)
	waitFor(t, bctx, "charts with points", `Number(document.querySelector('#chart-calls').dataset.points || 0) >= 3`)
	// Marks this page: a reload would lose it.
	_, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.sameLoad = true`))
	require.NoError(t, err)

	proxy.pause(true)
	waitFor(t, bctx, "the page to notice the cut stream", `document.querySelector('#conn').dataset.live === 'false'`)
	proxy.pause(false)
	waitFor(t, bctx, "the stream to reconnect by itself", `document.querySelector('#conn').dataset.live === 'true'`)

	shot := func(name string) {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(t.TempDir(), name), png, 0o644))
		if dst := os.Getenv("ZLINK_DASHBOARD_PNG"); dst != "" && name == "dashboard.png" {
			require.NoError(t, os.WriteFile(dst, png, 0o644))
		}
		t.Logf("screenshot %s: %d bytes", name, len(png))
	}
	shot("dashboard.png")

	_, err = b.Shutdown(ctx, 10*time.Second)
	require.NoError(t, err)
	waitFor(t, bctx, "node-2 no longer a Ready peer", `!document.querySelector('#peers tr[data-node="node-2"][data-state="Ready"]')`)
	waitFor(t, bctx, "the mesh view without node-2 serving", `!document.querySelector('#mesh-nodes tr[data-node="node-2"][data-state="Serving"]')`)
	waitFor(t, bctx, "the same page, never reloaded", `window.sameLoad === true`)
	waitFor(t, bctx, "node-1 still serving", `document.querySelector('#state-badge').dataset.state === 'Serving'`)
	shot("after-shutdown.png")
}
