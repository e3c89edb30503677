package admin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zlink-go/zlink/internal/browsertest"
	"github.com/zlink-go/zlink/rt/internal/admin"
)

// The server ends each event stream at its lifetime and the browser connects again at once:
// the dashboard keeps saying "live" through every such renewal, in a real headless Chromium.
// A stream that does not come back is still shown as broken.
func TestDashboardStaysLiveThroughTheStreamsRenewals(t *testing.T) {
	n := newTestNode()
	s := serve(t, admin.Config{StreamLifetime: 300 * time.Millisecond}, n)
	bctx := browsertest.Chromium(t)
	browsertest.Navigate(t, bctx, s.URL()+"/")
	browsertest.WaitFor(t, bctx, "the stream to be live", `document.querySelector('#conn').dataset.live === 'true'`)
	// Every text the indicator shows from here on, and every open of a stream.
	browsertest.Eval(t, bctx, `(() => {
		window.connTexts = [];
		const conn = document.querySelector('#conn');
		new MutationObserver(() => window.connTexts.push(conn.textContent)).observe(conn, {childList: true, characterData: true, subtree: true});
	})()`)
	browsertest.WaitFor(t, bctx, "five renewals of the stream", `window.connTexts.filter((s) => s === 'live').length >= 5`)
	browsertest.WaitFor(t, bctx, "the indicator never to have said the stream broke", `!window.connTexts.includes('reconnecting…') && document.querySelector('#conn').dataset.live === 'true'`)

	require.NoError(t, s.Close())
	browsertest.WaitFor(t, bctx, "a stream that does not come back shown broken", `document.querySelector('#conn').dataset.live === 'false' && document.querySelector('#conn').textContent === 'reconnecting…'`)
}
