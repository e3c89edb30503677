package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard: one HTML page, a style sheet and a script, embedded as they are (no build
// step, nothing fetched from elsewhere).
//
//go:embed page
var pageFiles embed.FS

// contentSecurityPolicy lets the page load its own files and talk to its own server only.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// page serves the dashboard: GET / is index.html, GET /assets/<file> the other files.
func page() http.Handler {
	files, err := fs.Sub(pageFiles, "page")
	if err != nil {
		panic(err) // the embedded directory exists: a build without it does not compile
	}
	assets := http.StripPrefix("/assets/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
		w.Header().Set("Cache-Control", "no-cache")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, files, "index.html")
			return
		}
		assets.ServeHTTP(w, r)
	})
}
