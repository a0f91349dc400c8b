// Package static holds the dashboard's stylesheet and other assets, embedded
// into the binary and served under /static/.
package static

import "embed"

// FS holds the assets at its root (style.css, ...).
//
//go:embed style.css
var FS embed.FS
