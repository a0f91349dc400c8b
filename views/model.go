// Package views renders leasewatch's HTML pages with templ.
//
// Components receive plain view models that the web package builds: every
// value is already formatted, so views hold no logic beyond layout. Backend
// data (lock names, holders, resources, event details) is untrusted and is only
// ever written through templ's escaping, in HTML and in SVG alike.
package views

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/a-h/templ"
)

// Nav names the section a page belongs to, for the navigation bar.
type Nav string

// Sections of the navigation bar.
const (
	NavOverview Nav = "overview"
	NavLocks    Nav = "locks"
	NavFindings Nav = "findings"
	NavReview   Nav = "review"
	NavSources  Nav = "sources"
	NavAlerts   Nav = "alerts"
)

// Stamp is a formatted instant: Text for people, ISO (RFC 3339) for the
// datetime attribute. A zero Stamp renders as a dash.
type Stamp struct {
	Text string
	ISO  string
	Ago  string // "3m ago", for pages that show recency; may be empty
}

// Link is a labelled URL; Current marks the choice in effect.
type Link struct {
	Label   string
	URL     string
	Current bool
}

// Live makes a region refresh itself with htmx: the page's own URL is fetched
// every Every seconds and the region with the same id swapped in. Without
// JavaScript the region shows a plain refresh link instead.
type Live struct {
	ID    string
	URL   string
	Every int // seconds; 0 disables polling
}

// OverviewPage is the landing page: what is held now, what is about to
// expire, the last day's findings and the sources' health.
type OverviewPage struct {
	Live        Live
	Now         Stamp
	Counts      OverviewCounts
	Held        []LockRow // most recently acquired first
	StripLabel  string    // what the held locks' strips span: "Last hour", or less
	NearExpiry  []LockRow // least lease left first
	Margin      string    // the renew margin, e.g. "25%"
	Severities  []SeverityCount
	Verdicts    []VerdictCount // locks per kept verdict (over the last 24 h), in verdict order
	Findings    []FindingRow   // the last day's newest findings, newest first
	Sources     []SourceRow
	HeldURL     string
	NearURL     string
	FindingsURL string
	TopWriters  TopWriters
}

// OverviewCounts are the headline numbers.
type OverviewCounts struct {
	Locks, Held, Free, Expired, NearExpiry, Heartbeats int
	Findings24h                                        int // critical and warning
	Info24h                                            int // info findings, beside them
	SourcesDown                                        int
}

// SeverityCount is the number of findings of one severity, linked to them.
type SeverityCount struct {
	Severity string
	N        int
	URL      string
}

// LocksPage is the locks table with its filter form.
type LocksPage struct {
	Filter   LockFilter
	Sources  []string // choices for the source filter
	Kinds    []string
	Verdicts []string // choices for the verdict filter
	Locks    []LockRow
	Total    int // locks matching the filter
	// TotalAtLeast says Total is a lower bound (searches count so far only).
	TotalAtLeast bool
	Truncated    bool // more locks follow this page
	Limit        int
	Now          Stamp
	Sorts        []Link // column orders, the current one marked
	First        string // URL of the first page; empty on it
	Prev         string // URL of the previous page; empty when none
	Next         string // URL of the next page; empty when none
}

// LockFilter is the locks page's filter form as submitted.
type LockFilter struct {
	Source  string
	Kind    string
	Q       string
	Class   string // "" (locks only), "lock", "heartbeat" or "all"
	State   string
	Holder  string
	Verdict string
	Sort    string
}

// LockRow is one row of a locks table.
type LockRow struct {
	ID         int64
	Source     string
	Name       string
	Class      string
	State      string
	Holder     string
	HolderURL  string // the locks list filtered to this holder
	Token      string
	Acquired   Stamp
	Renewed    Stamp
	Changed    Stamp
	ExpiresIn  string
	LeftPct    int  // lease left in percent, 0..100, for the margin bar; -1 unknown
	NearExpiry bool // held, with less than the renew margin of its lease left
	// Verdict is the lock's kept safety verdict over the last 24 hours;
	// empty when not judged yet.
	Verdict string
	// Strip is the lock's last hour, on the overview's held locks.
	Strip Strip
}

// Strip is a small picture of a lock's last hour: its tenures in turn and
// marks for what matters, in SVG user units over Width.
type Strip struct {
	Width float64
	Segs  []StripSeg
	Marks []StripMark
	Title string // the strip in words: counts of its marks
}

// StripSeg is one tenure; Alt alternates between consecutive tenures.
type StripSeg struct {
	X, W  float64
	Alt   bool
	Title string
}

// StripMark is a handover, an expiry, or a critical or warning finding
// (Kind: handover, expired, critical, warning).
type StripMark struct {
	X     float64
	Kind  string
	Title string
}

// VerdictCount is how many locks have one kept verdict, linked to them.
type VerdictCount struct {
	Kind string
	N    int
	URL  string
}

// LockPage is one lock: its current state, holder timeline, tenures,
// findings and events within the chosen window.
type LockPage struct {
	Lock            LockSummary
	At              AtBanner // empty without ?at=
	Verdict         VerdictPanel
	Health          HealthPanel
	Advice          AdvicePanel
	Live            Live // empty for a fixed (custom) window
	Window          WindowNav
	Timeline        Timeline
	Tenures         []TenureRow // newest first
	TenuresTrimmed  bool
	Findings        []FindingRow // newest first
	FindingsTrimmed bool
	FindingsURL     string
	Events          []EventRow // newest first
	EventFilter     EventFilter
	EventKinds      []string
	EventsNewer     string // URL of the newest events page; empty on it
	EventsOlder     string // URL of the next (older) events page; empty when none
	ReviewURL       string // the incident review of this lock in this window; empty if none
}

// AtBanner says who held the lock at the instant the page was asked about
// (?at=): State "held", "free" or "blind", and Text in words. Seq is the
// tenure current then, highlighted in the timeline and the tenure list; 0
// when none was.
type AtBanner struct {
	State     string // "" when the page was asked about no instant
	At        Stamp
	Text      string
	Seq       int64
	Holder    string // the holder then, or the last one before it; "" when none
	HolderURL string
	APIURL    string // the same answer as JSON
}

// HolderPage is one holder identity's tenures across every lock and
// source, newest first.
type HolderPage struct {
	Holder   string
	LocksURL string // the locks it holds now
	APIURL   string
	Tenures  []HolderTenureRow
	First    string // URL of the newest page; empty on it
	Older    string // URL of the next (older) page; empty when none
}

// HolderTenureRow is one tenure of a holder's.
type HolderTenureRow struct {
	Lock        string // SOURCE/NAME
	LockURL     string // the lock's page at the grant
	Source      string
	Seq         int64
	Token       string
	Granted     Stamp
	Observed    bool
	Ended       Stamp
	End         string // "held" while held
	Findings    string // count of the lock's findings during the tenure, "100+" past the cap
	FindingsURL string // those findings
}

// VerdictPanel is a lock's safety verdict over one scope (the page's
// window, the last 24 hours or the whole history), at the top of its page.
type VerdictPanel struct {
	Kind    string // unsafe, unverified, fenced or efficiency
	Purpose string // correctness or efficiency
	Scope   string // the scope's words: "in this window", ...
	Scopes  []Link // the other scopes, Current marking this one
	Reasons []VerdictReason
	Figures []Field // label and value: token share, overlaps, blind share, longest gap
	// Resources are the reporting resources, by name.
	Resources []VerdictResource
	Notes     []string
	// Judged is when the verdict was judged: a verdict is judged at most
	// every few seconds, however often the page is asked for.
	Judged Stamp
}

// VerdictReason is one reason of a verdict, linked to its evidence.
type VerdictReason struct {
	Text    string
	Decides bool
	Href    string // the findings or writes behind it; empty when none
	Label   string // the link's words
}

// VerdictResource is what one resource reported in the verdict's scope.
type VerdictResource struct {
	Name                       string
	Accepted, Rejected         int
	Untokened, Stale, Unfenced int
	MaxExposure, TotalExposure string
	LastReport                 Stamp
}

// WindowNav is the time window control of the lock page.
type WindowNav struct {
	From, To   Stamp
	FromInput  string // for the custom form, in the page's zone
	ToInput    string
	Zone       string // "UTC" or a zone name
	Presets    []Link // 15m, 1h, ...
	Earlier    string
	Later      string
	ZoomIn     string
	ZoomOut    string
	Zones      []Link  // UTC and local
	Hidden     []Field // query parameters the custom form keeps
	Custom     bool
	Refreshing bool // the window ends now and follows it
	// Note says why the window is not the preset asked for (the lock's
	// history is shorter, or nothing happened in it), with a link to it.
	Note, NoteLink, NoteLabel string
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
	HolderURL     string // the holder's page; empty without a holder
	Token         string
	LeaseDuration string
	Acquired      Stamp
	Renewed       Stamp
	Expires       Stamp
	ExpiresIn     string
	LeftPct       int
	NearExpiry    bool
	Changed       Stamp
}

// TenureRow is one holder's tenure of a lock.
type TenureRow struct {
	Seq           int64
	Holder        string
	HolderURL     string // the holder's page; empty without a holder
	Token         string
	Granted       Stamp
	Observed      bool // held when the collector started: Granted is when it was first seen
	At            bool // the tenure current at the page's ?at=
	Renewals      int64
	Pruned        string // what retention removed of the renewals, e.g. "118 pruned, least margin 30%"; empty if none
	LastRenewed   Stamp
	LeaseDuration string
	Expires       Stamp
	Ended         Stamp
	End           string // "held" while held
	ZoomURL       string // the timeline window around this tenure
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
	Sources    []string
	Findings   []FindingRow // newest first
	Truncated  bool
	Limit      int
	First      string // URL of the newest page; empty on it
	Older      string // URL of the next (older) page; empty when none
}

// FindingFilter is the findings page's filter form as submitted.
type FindingFilter struct {
	Kind     string
	Severity string
	Source   string
	Lock     string // lock id or SOURCE/NAME, kept so a link from a lock page stays scoped
	Resource string
	Class    string // of the findings' locks: "" (locks only), "lock", "heartbeat" or "all"
	From     string
	To       string
}

// FindingRow is one finding.
type FindingRow struct {
	ID          int64
	LockID      int64
	Lock        string // SOURCE/NAME
	Kind        string
	Severity    string
	At          Stamp
	Until       Stamp
	Duration    string
	Summary     string
	Tokens      string
	Holders     string
	Resource    string
	TimelineURL string // the lock's timeline centred on the finding
	// Folded are the other findings a row of short exposures stands for
	// (their anchors), and FoldURL lists each of them.
	Folded  []int64
	FoldURL string
}

// SourcesPage lists configured sources, their collectors' health and their
// blind windows.
type SourcesPage struct {
	Live    Live
	Now     Stamp
	Sources []SourceRow
	Blinds  []BlindRow // newest first
	Since   Stamp      // blind windows are listed from here on
}

// SourceRow is one source's health.
type SourceRow struct {
	Name       string
	Kind       string
	State      string
	LastEvent  Stamp  // the source's newest event, with how long ago: its activity, not a lag
	Lag        string // observation lag of the source's latest commit (audit.Source.Lag); "" before the first
	LagAt      Stamp  // when that commit was
	Cursor     string // the collector's resume position
	CursorAt   Stamp
	BlindSince Stamp
	Blinds     int // blind windows in the listed period
	Degraded   string
	Error      string
	Locks      int
	LocksURL   string
	BlindsURL  string
}

// BlindRow is one interval over which a source's collector was blind.
type BlindRow struct {
	Source      string
	From, To    Stamp
	Duration    string
	Reason      string
	Locks       int
	FindingsURL string
}

// ErrorPage is shown when an HTML request fails.
type ErrorPage struct {
	Status  int
	Title   string
	Message string
}

// lockVerdictURL is a lock's page opened on its verdict over the last 24
// hours, the one the locks list shows.
func lockVerdictURL(id int64) templ.SafeURL {
	return templ.SafeURL(fmt.Sprintf("/locks/%d?verdict=24h#verdict", id))
}

// lockURL links to a lock's page.
func lockURL(id int64) templ.SafeURL {
	return templ.SafeURL(fmt.Sprintf("/locks/%d", id))
}

// lockFindingsURL links to the findings page scoped to one lock.
func lockFindingsURL(id int64) templ.SafeURL {
	return templ.SafeURL("/findings?" + url.Values{"lock": {fmt.Sprint(id)}}.Encode())
}

// safe marks a URL the web package built from its own route and encoded
// query values as safe to use in href. Only relative URLs are accepted; any
// other value becomes "#".
func safe(u string) templ.SafeURL {
	if u == "" || (u[0] != '/' && u[0] != '?' && u[0] != '#') || (len(u) > 1 && u[0] == '/' && u[1] == '/') {
		return "#"
	}
	return templ.SafeURL(u)
}

// dash stands in for an empty value.
func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// plural returns "1 lock" or "3 locks".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// AlertsPage lists the live alerts, the recently resolved ones and the held
// leases near expiry.
type AlertsPage struct {
	Live       Live
	Now        Stamp
	Firing     []AlertRow // by name, source, lock and holder
	Resolved   []AlertRow // newest first
	NearExpiry []LockRow  // least lease left first
	Margin     string     // the renew margin, e.g. "25%"
	NearURL    string
	// Elsewhere names the sources another replica owns, comma-separated:
	// their alerts are evaluated and sent there, and listed on its page.
	Elsewhere string
}

// AlertRow is one alert. Lock is empty for an alert about a source;
// LockURL links to the lock's timeline when the lock is known.
type AlertRow struct {
	Name, Severity, Source, Lock, Holder, Summary string
	LockURL                                       string
	StartsAt, EndsAt                              Stamp
}

// verdictIcon gives each verdict a shape besides its colour.
func verdictIcon(kind string) string {
	switch kind {
	case "unsafe":
		return "✖"
	case "unverified":
		return "?"
	case "fenced":
		return "✔"
	default:
		return "≈"
	}
}

// HealthPanel is a lock's leadership health over the page's window: the
// distributions of its tenures' lengths, its takeover times and its
// renewals' margins.
type HealthPanel struct {
	Charts []HealthChart
	Note   string // what a cap left out; empty when nothing
}

// AdvicePanel is the lease settings that fit the stalls of the lock page's
// window (audit/advise): the gaps of the lock and of each holder, the
// current and the suggested settings, and what is flagged. Empty says why
// there is nothing to size, when there is not.
type AdvicePanel struct {
	Empty    string
	Gaps     []AdviceGaps // the lock's, then each holder's
	Settings []AdviceSettings
	Flags    []string
	Note     string
	APIURL   string
}

// AdviceGaps is one row of gaps: whose, how many, their percentiles, the
// longest stall, the least lease that tolerates it, and whether the current
// lease is shorter than that stall.
type AdviceGaps struct {
	Holder, Count, P50, P90, P99, Longest, Needed string
	Short                                         bool
}

// AdviceSettings is one row of settings, current or suggested.
type AdviceSettings struct {
	Name, Lease, RenewDeadline, RetryPeriod, Writes string
}

// HealthChart is one distribution: Count samples, their Median (empty
// without any), and a bar per bucket.
type HealthChart struct {
	Title  string
	Count  int
	Median string
	Bars   []HealthBar
}

// HealthBar is one bucket: its Label, how many samples fell in it, and its
// length as a percentage of the longest bar.
type HealthBar struct {
	Label string
	Count int
	Pct   int
}
