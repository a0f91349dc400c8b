// Package static holds the dashboard's stylesheet, scripts and other assets,
// embedded into the binary and served under /static/.
package static

import "embed"

// FS holds the assets at its root (style.css, htmx.min.js, app.js, favicon.svg).
//
//go:embed style.css htmx.min.js app.js favicon.svg
var FS embed.FS
