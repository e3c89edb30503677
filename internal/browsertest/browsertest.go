// Package browsertest runs a real headless Chromium for the tests of pages the module serves
// (the admin dashboard), through the Chrome DevTools protocol (chromedp).
//
// The browser is Debian's chromium package. Without one a test fails, telling how to install
// it, unless the environment variable ZLINK_BROWSER_OPTIONAL is set, in which case it skips:
// CI never sets it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// OptionalEnv, when set, lets a test skip on a machine without Chromium.
const OptionalEnv = "ZLINK_BROWSER_OPTIONAL"

// Chromium starts a headless Chromium for the test and returns its context; the browser ends
// with the test.
func Chromium(t testing.TB) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv(OptionalEnv) != "" {
			t.Skipf("no Chromium on this machine, and %s is set", OptionalEnv)
		}
		t.Fatalf("no Chromium on this machine: install Debian's chromium package (apt-get install -y chromium), or set %s=1 to skip the browser tests", OptionalEnv)
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
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return bctx
}

// Navigate opens url, within a minute.
func Navigate(t testing.TB, bctx context.Context, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

// WaitFor polls a JavaScript condition in the page until it holds, for 45 s at most.
func WaitFor(t testing.TB, bctx context.Context, what, expr string) {
	t.Helper()
	ok, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(45*time.Second)))
	if err != nil || !ok {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// Eval runs a JavaScript expression in the page.
func Eval(t testing.TB, bctx context.Context, expr string) {
	t.Helper()
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[any](expr)); err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
}

// Screenshot takes a picture of the whole page and writes it, as PNG, to each path.
func Screenshot(t testing.TB, bctx context.Context, paths ...string) {
	t.Helper()
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	for _, p := range paths {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot: %d bytes to %v", len(png), paths)
}
