// Package views renders leasewatch's HTML pages with templ.
//
// Components receive plain view models that the web package builds: every
// value is already formatted, so views hold no logic beyond layout. Backend
// data (lock names, holders, resources, event details) is untrusted and is only
// ever written through templ's escaping.
package views

import (
	"fmt"
	"net/url"

	"github.com/a-h/templ"
)

// Nav names the section a page belongs to, for the navigation bar.
type Nav string

// Sections of the navigation bar.
const (
	NavLocks    Nav = "locks"
	NavFindings Nav = "findings"
	NavSources  Nav = "sources"
)

// Stamp is a formatted instant: Text for people, ISO (RFC 3339) for the
// datetime attribute. A zero Stamp renders as a dash.
type Stamp struct {
	Text string
	ISO  string
}

// LocksPage is the locks table with its filter form.
type LocksPage struct {
	Filter    LockFilter
	Sources   []string // choices for the source filter
	Locks     []LockRow
	Truncated bool // more locks matched than the page shows
	Limit     int
	Now       Stamp
}

// LockFilter is the locks page's filter form as submitted.
type LockFilter struct {
	Source string
	Q      string
	Class  string // "" (locks only), "lock", "heartbeat" or "all"
	State  string
}

// LockRow is one row of the locks table.
type LockRow struct {
	ID         int64
	Source     string
	Name       string
	Class      string
	State      string
	Holder     string
	Token      string
	Acquired   Stamp
	Renewed    Stamp
	ExpiresIn  string
	NearExpiry bool // held, with less than the renew margin of its lease left
}

// LockPage is one lock: its current state, tenures, findings and recent events.
type LockPage struct {
	Lock            LockSummary
	Tenures         []TenureRow // newest first
	TenuresTrimmed  bool
	Findings        []FindingRow // newest first
	FindingsTrimmed bool
	Events          []EventRow // newest first
	EventsTrimmed   bool
	EventFilter     EventFilter
	EventKinds      []string
}

// EventFilter is the lock page's event filter as submitted.
type EventFilter struct {
	Kind string
	From string
	To   string
}

// LockSummary is a lock's current state.
type LockSummary struct {
	ID            int64
	Source        string
	Kind          string
	Name          string
	Class         string
	State         string
	Holder        string
	Token         string
	LeaseDuration string
	Acquired      Stamp
	Renewed       Stamp
	Expires       Stamp
	ExpiresIn     string
	NearExpiry    bool
	Changed       Stamp
}

// TenureRow is one holder's tenure of a lock.
type TenureRow struct {
	Seq           int64
	Holder        string
	Token         string
	Granted       Stamp
	Observed      bool // held when the collector started: Granted is when it was first seen
	Renewals      int64
	LastRenewed   Stamp
	LeaseDuration string
	Expires       Stamp
	Ended         Stamp
	End           string // "held" while held
}

// EventRow is one recorded event of a lock.
type EventRow struct {
	ID       int64
	Kind     string
	At       Stamp
	Holder   string
	Token    string
	TTL      string
	Position string
	Inferred bool
	Resource string
	Detail   []Field
}

// Field is one key and formatted value of an event's detail.
type Field struct {
	Key   string
	Value string
}

// FindingsPage lists findings with their filter form.
type FindingsPage struct {
	Filter     FindingFilter
	Kinds      []string
	Severities []string
	Findings   []FindingRow // newest first
	Truncated  bool
	Limit      int
}

// FindingFilter is the findings page's filter form as submitted.
type FindingFilter struct {
	Kind     string
	Severity string
	Lock     string // lock id, kept so a link from a lock page stays scoped
	Resource string
}

// FindingRow is one finding.
type FindingRow struct {
	ID       int64
	LockID   int64
	Lock     string // SOURCE/NAME
	Kind     string
	Severity string
	At       Stamp
	Until    Stamp
	Duration string
	Summary  string
	Tokens   string
	Holders  string
	Resource string
}

// SourcesPage lists configured sources and their collectors' health.
type SourcesPage struct {
	Sources []SourceRow
}

// SourceRow is one source's health.
type SourceRow struct {
	Name       string
	Kind       string
	State      string
	LastEvent  Stamp
	BlindSince Stamp
	Error      string
}

// ErrorPage is shown when an HTML request fails.
type ErrorPage struct {
	Status  int
	Title   string
	Message string
}

// lockURL links to a lock's page.
func lockURL(id int64) templ.SafeURL {
	return templ.SafeURL(fmt.Sprintf("/locks/%d", id))
}

// lockFindingsURL links to the findings page scoped to one lock.
func lockFindingsURL(id int64) templ.SafeURL {
	return templ.SafeURL("/findings?" + url.Values{"lock": {fmt.Sprint(id)}}.Encode())
}

// dash stands in for an empty value.
func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
