// Package present turns what the query layer read into the views' models:
// the rows of each list, the links between pages, the lock page's timeline
// geometry and the overview's strips, the verdict, health and review
// panels. It is the dashboard's drawing side: every function is a pure
// function of the data read, the request's query string, zone and time,
// and the service's settings (Pages). It does no HTTP, reads no store and
// takes no context; web reads, calls a builder here and renders.
//
// The dependency goes one way: present imports the query layer's types
// and limits (audit/query, audit/history, audit/review, audit/verdict),
// and the query layer knows nothing of how a page draws. Where drawing
// decides what is worth reading, present says so in a value the reader
// takes (TimelineWriteBins) or a decision web asks before reading more
// (DrawsRenewals).
package present

import (
	"net/url"
	"time"
)

// Pages shapes the dashboard's pages. Its fields are the service's
// settings, the same for every request.
type Pages struct {
	// RenewMargin marks a held lock near expiry when less than this share
	// of its lease is left (alerts.renew_margin_ratio); zero marks none.
	RenewMargin float64
	// GroupExposuresUnder folds, in the findings lists, the exposures
	// shorter than it of one lock and resource into one row; zero or
	// negative: every exposure on its own row.
	GroupExposuresUnder time.Duration
}

// Request is what a page's builder takes of its request besides the data
// read: the query string its links keep, the URI its live region refreshes
// from, the zone its times are shown in and the time it was asked at.
type Request struct {
	Query url.Values
	URI   string
	Loc   *time.Location
	Now   time.Time
}

// How often the live regions poll, in seconds.
const (
	RefreshOverview = 5
	refreshLock     = 10
)
