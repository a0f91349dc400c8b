package web

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // zone names for tz= work on hosts without a zone database
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/web/present"
)

// maxLimit caps limit on every list so one request cannot ask for the whole
// database at once.
const maxLimit = audit.MaxListLimit

// pathID parses the :id path parameter.
func pathID(c echo.Context) (int64, error) {
	return parseID("id", c.Param("id"))
}

// parseID parses a lock id named name.
func parseID(name, s string) (int64, error) {
	id, err := integerValue(s)
	if err != nil || id <= 0 {
		return 0, audit.Errorf(audit.EINVALID, "%s: must be a positive integer", name)
	}
	return id, nil
}

// parseTimeFilter reads from, to and the limit of list l.
func parseTimeFilter(q url.Values, l listing) (audit.TimeFilter, error) {
	var f audit.TimeFilter
	var err error
	if f.From, err = parseTime(q, "from"); err != nil {
		return f, err
	}
	if f.To, err = parseTime(q, "to"); err != nil {
		return f, err
	}
	if !f.From.IsZero() && !f.To.IsZero() && f.To.Before(f.From) {
		return f, audit.Errorf(audit.EINVALID, "to: must not be before from")
	}
	if f.Limit, err = l.limit(q); err != nil {
		return f, err
	}
	return f, nil
}

// cursorOf is the before cursor of the page after one whose oldest item
// is at, id: the API's next.
func cursorOf(at time.Time, id int64) *string {
	s := present.FormatCursor(at, id)
	return &s
}

// parseTime reads an optional RFC 3339 time parameter, clamped to the times
// the store keeps (see audit.BoundTime): a time given is never the zero time, which
// means the parameter is absent.
func parseTime(q url.Values, name string) (time.Time, error) {
	s := q.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := parseRFC3339(s)
	if err != nil {
		return time.Time{}, audit.Errorf(audit.EINVALID, "%s: must be an RFC 3339 time such as 2006-01-02T15:04:05Z", name)
	}
	return audit.BoundTime(t), nil
}

// rfc3339 is RFC 3339's date-time (section 5.6), whose T and Z may be
// lower case. web/openapi.yaml gives every time a client sends this
// pattern, beside format: date-time.
var rfc3339 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$`)

// parseRFC3339 reads an RFC 3339 date-time: what the API's format:
// date-time allows, and nothing else (time.Parse alone refuses a lower-case
// t or z and leap seconds, and takes a comma before the fraction, one-digit
// hours and offsets past 23:59). A leap second, 23:59:60 in UTC, is read as
// the last nanosecond before the minute ends: Go's times have no leap
// seconds, and this keeps reports in the order they were made.
func parseRFC3339(s string) (time.Time, error) {
	if !rfc3339.MatchString(s) {
		return time.Time{}, errors.New("not an RFC 3339 date-time")
	}
	s = strings.ToUpper(s) // only T and Z have a case
	if off := s[len(s)-6:]; off[0] == '+' || off[0] == '-' {
		if off[1:3] > "23" || off[4:] > "59" {
			return time.Time{}, errors.New("offset out of range")
		}
	}
	leap := s[17:19] == "60"
	if leap {
		// 23:59:60 becomes 23:59:59.999999999, in the time's own offset.
		end := strings.IndexAny(s[19:], "Z+-") + 19
		s = s[:17] + "59.999999999" + s[end:]
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	if leap && (t.UTC().Hour() != 23 || t.UTC().Minute() != 59) {
		return time.Time{}, errors.New("a leap second is 23:59:60 UTC")
	}
	return t, nil
}

// maxPageRows caps the rows of one page's table, whatever limit asks for:
// the API's lists go up to maxLimit.
const maxPageRows = 1000

// listing is how one list reads its limit and class when a request leaves them
// out, and the most rows it gives. Each list's are declared here, once.
type listing struct {
	rows  int         // when no limit is asked; 0 leaves it to the store
	most  int         // whatever limit is asked
	class audit.Class // when no class is asked; "" is every class
}

// The lists. Heartbeats are recorded but kept out of the default views (the
// pages, the findings API): their class is lock unless asked. The locks
// API's is every class, as its contract has always said.
var (
	locksPage    = listing{rows: 100, most: maxPageRows, class: audit.ClassLock}
	eventsPage   = listing{rows: 50, most: maxPageRows}
	findingsPage = listing{rows: 100, most: maxPageRows, class: audit.ClassLock}
	holderPage   = listing{rows: 50, most: maxPageRows}
	locksAPI     = listing{most: maxLimit}
	findingsAPI  = listing{most: maxLimit, class: audit.ClassLock}
	otherAPI     = listing{most: maxLimit} // events, tenures, a holder's tenures
)

// limit reads the optional positive limit: l.rows when absent, at most
// l.most.
func (l listing) limit(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return l.rows, nil
	}
	n, err := integerValue(s)
	if errors.Is(err, errRange) && s[0] != '-' {
		return l.most, nil // too large for an int64: still a positive integer
	}
	if err != nil || n <= 0 {
		return 0, audit.Errorf(audit.EINVALID, "limit: must be a positive integer")
	}
	return int(min(n, int64(l.most))), nil
}

// decimal is a decimal number as a query parameter or JSON spells one.
var decimal = regexp.MustCompile(`^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$`)

// Why integerValue refuses a number.
var (
	errNotInteger = errors.New("not an integer")
	errRange      = errors.New("outside int64")
)

// integerValue reads s, a decimal number, as the integer it is worth, as
// JSON Schema's type integer counts one: 42, +42, 042, 42.0, 4.2e1 and
// 420e-1 are all 42, exactly, however many digits they have. It fails with
// errNotInteger for anything else, errRange past int64.
func integerValue(s string) (int64, error) {
	if !decimal.MatchString(s) {
		return 0, errNotInteger
	}
	num := strings.TrimLeft(s, "+-")
	mant, exp := num, ""
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		mant, exp = num[:i], num[i+1:]
	}
	whole, frac, _ := strings.Cut(mant, ".")
	// The value is digits × 10^e, digits without leading or trailing zeros.
	// An exponent past ±2^30 leaves 0 or far outside int64 either way; the
	// bound keeps e from overflowing.
	x, _ := strconv.Atoi(exp) // "" is 0; out of range is clamped
	e := max(min(x, 1<<30), -1<<30) - len(frac)
	digits := strings.TrimLeft(whole+frac, "0")
	for strings.HasSuffix(digits, "0") {
		digits, e = digits[:len(digits)-1], e+1
	}
	switch {
	case digits == "":
		return 0, nil // -0, 0.0 and 0e9 are 0
	case e < 0:
		return 0, errNotInteger
	case len(digits)+e > 19:
		return 0, errRange
	}
	n, err := strconv.ParseInt(s[:len(s)-len(num)]+digits+strings.Repeat("0", e), 10, 64)
	if err != nil {
		return 0, errRange
	}
	return n, nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// classOf reads the class parameter: lock, heartbeat, or all for every
// class; l.class when absent.
func (l listing) classOf(q url.Values) (audit.Class, error) {
	switch c := audit.Class(q.Get("class")); c {
	case "":
		return l.class, nil
	case "all":
		return "", nil
	case audit.ClassLock, audit.ClassHeartbeat:
		return c, nil
	default:
		return "", audit.Errorf(audit.EINVALID, `class: must be "lock", "heartbeat" or "all"`)
	}
}

// parseState reads the state parameter.
func parseState(q url.Values) (audit.LockState, error) {
	switch st := audit.LockState(q.Get("state")); st {
	case "", audit.StateHeld, audit.StateFree, audit.StateExpired:
		return st, nil
	default:
		return "", audit.Errorf(audit.EINVALID, `state: must be "held", "free" or "expired"`)
	}
}

// lockQuery is a parsed locks request: the store's filter, from and to
// selecting by last change.
type lockQuery struct {
	audit.LockFilter
}

// maxQuery bounds q, the locks search, in characters: well past any lock name
// or holder ingest takes, and far inside SQLite's 50,000-byte LIKE pattern
// limit even when every character is escaped.
const maxQuery = 1024

// parseLockQuery reads the parameters of the locks list l (the page's or
// the API's), kinds being the source kinds there are.
func parseLockQuery(q url.Values, l listing, kinds []audit.SourceKind) (lockQuery, error) {
	var lq lockQuery
	// from and to select by last change, in the store like every filter.
	w, err := parseTimeFilter(q, l)
	if err != nil {
		return lq, err
	}
	lq.ChangedFrom, lq.ChangedTo, lq.Limit = w.From, w.To, w.Limit
	if lq.State, err = parseState(q); err != nil {
		return lq, err
	}
	lq.Source = q.Get("source")
	lq.Name = q.Get("name")
	lq.Q = q.Get("q")
	if utf8.RuneCountInString(lq.Q) > maxQuery {
		return lq, audit.Errorf(audit.EINVALID, "q: must be at most %d characters", maxQuery)
	}
	if lq.Verdict, err = parseVerdict(q); err != nil {
		return lq, err
	}
	if lq.Class, err = l.classOf(q); err != nil {
		return lq, err
	}
	return lq, parseLockPage(q, &lq, kinds)
}

// parseLockPage reads the locks list's additions to the filter: kind,
// holder, sort (name, changed, or margin: held locks by lease left) and the
// keyset cursors after and before (lock ids).
func parseLockPage(q url.Values, lq *lockQuery, kinds []audit.SourceKind) error {
	if k := audit.SourceKind(q.Get("kind")); k != "" {
		if !slices.Contains(kinds, k) {
			return mustBe("kind", kinds)
		}
		lq.Kind = k
	}
	lq.Holder = q.Get("holder")
	switch q.Get("sort") {
	case "", "name":
		lq.Sort = audit.SortName
	case "changed":
		lq.Sort = audit.SortChanged
	case "margin":
		// Lease left only means something for held locks.
		lq.Sort = audit.SortExpiry
		if lq.State == "" {
			lq.State = audit.StateHeld
		}
	default:
		return audit.Errorf(audit.EINVALID, `sort: must be "name", "changed" or "margin"`)
	}
	var err error
	if lq.After, err = parseOptionalID(q, "after"); err != nil {
		return err
	}
	if lq.Before, err = parseOptionalID(q, "before"); err != nil {
		return err
	}
	if lq.After != 0 && lq.Before != 0 {
		return audit.Errorf(audit.EINVALID, "before: cannot be used with after")
	}
	return nil
}

// parseEventFilter reads the parameters of a lock's event list l.
func parseEventFilter(q url.Values, l listing) (audit.EventFilter, error) {
	var f audit.EventFilter
	var err error
	if f.TimeFilter, err = parseTimeFilter(q, l); err != nil {
		return f, err
	}
	if k := audit.EventKind(q.Get("kind")); k != "" {
		if !k.Valid() {
			return f, audit.Errorf(audit.EINVALID, "kind: unknown event kind %q", truncate(string(k), 64))
		}
		f.Kind = k
	}
	if f.Before, err = parseCursor(q, "before"); err != nil {
		return f, err
	}
	return f, nil
}

// parseFindingsQuery reads the findings list parameters. Without class,
// only findings of class lock match, unless a lock is named.
func parseFindingsQuery(q url.Values, l listing) (query.FindingsQuery, error) {
	var fq query.FindingsQuery
	f := &fq.Filter
	var err error
	if f.TimeFilter, err = parseTimeFilter(q, l); err != nil {
		return fq, err
	}
	if k := audit.FindingKind(q.Get("kind")); k != "" {
		if !k.Valid() {
			return fq, audit.Errorf(audit.EINVALID, "kind: unknown finding kind %q", truncate(string(k), 64))
		}
		f.Kind = k
	}
	if sev := audit.Severity(q.Get("severity")); sev != "" {
		if !sev.Valid() {
			return fq, audit.Errorf(audit.EINVALID, `severity: must be "critical", "warning" or "info"`)
		}
		f.Severity = sev
	}
	f.Resource = q.Get("resource")
	f.Source = q.Get("source")
	if f.Before, err = parseCursor(q, "before"); err != nil {
		return fq, err
	}
	if f.Class, err = l.classOf(q); err != nil {
		return fq, err
	}
	fq.Limit = f.Limit
	fq.ClassGiven = q.Get("class") != ""
	if v := q.Get("lock"); v != "" {
		// A lock id, or (an addition to the API) SOURCE/NAME.
		if isDigits(v) || !strings.Contains(v, "/") {
			fq.Lock.ID, err = parseID("lock", v)
			return fq, err
		}
		if fq.Lock.Key, err = audit.ParseLockKey(v); err != nil {
			return fq, audit.Errorf(audit.EINVALID, "lock: must be a lock id or SOURCE/NAME")
		}
	}
	return fq, nil
}

// truncate shortens s to at most n bytes without splitting a UTF-8 sequence,
// for echoing user input in messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// How long a lock page's custom window may be, and its default.
const (
	defaultWindow = time.Hour
	maxWindow     = 92 * 24 * time.Hour
	minWindow     = time.Second
)

// parseWindow reads window (a preset) or from/to (a custom window, RFC 3339
// or a datetime-local value in loc). Only one side given keeps the preset's
// (or an hour's) length.
func parseWindow(q url.Values, now time.Time, loc *time.Location) (query.Window, error) {
	span := defaultWindow
	preset := "1h"
	if name := q.Get("window"); name != "" {
		found := false
		for _, p := range present.WindowPresets {
			if p.Name == name {
				span, preset, found = p.Span, p.Name, true
			}
		}
		if !found {
			return query.Window{}, audit.Errorf(audit.EINVALID, `window: must be one of 15m, 1h, 6h, 24h, 7d`)
		}
	}
	from, err := parseWindowTime(q, "from", loc)
	if err != nil {
		return query.Window{}, err
	}
	to, err := parseWindowTime(q, "to", loc)
	if err != nil {
		return query.Window{}, err
	}
	switch {
	case from.IsZero() && to.IsZero():
		return query.Window{From: now.Add(-span), To: now, Preset: preset}, nil
	case from.IsZero():
		from = to.Add(-span)
	case to.IsZero():
		to = from.Add(span)
	}
	if !to.After(from) {
		return query.Window{}, audit.Errorf(audit.EINVALID, "to: must be after from")
	}
	if to.Sub(from) > maxWindow {
		return query.Window{}, audit.Errorf(audit.EINVALID, "to: the window may be at most 92 days long")
	}
	if to.Sub(from) < minWindow {
		to = from.Add(minWindow)
	}
	return query.Window{From: from, To: to}, nil
}

// parseWindowTime reads an RFC 3339 time or a datetime-local value
// (2006-01-02T15:04[:05]) in loc.
func parseWindowTime(q url.Values, name string, loc *time.Location) (time.Time, error) {
	s := q.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := parseRFC3339(s); err == nil {
		return audit.BoundTime(t), nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return audit.BoundTime(t), nil
		}
	}
	return time.Time{}, audit.Errorf(audit.EINVALID, "%s: must be an RFC 3339 time such as 2006-01-02T15:04:05Z", name)
}

// parseZone reads tz: empty or UTC, local (the server's zone) or an IANA
// zone name.
func parseZone(q url.Values) (*time.Location, error) {
	switch name := q.Get("tz"); name {
	case "", "UTC", "utc", "Z":
		return time.UTC, nil
	case "local":
		return time.Local, nil
	default:
		loc, err := time.LoadLocation(name)
		if err != nil || len(name) > 64 {
			return nil, audit.Errorf(audit.EINVALID, "tz: unknown time zone %q", truncate(name, 64))
		}
		return loc, nil
	}
}

// parseCursor reads an (at, id) keyset cursor written by
// present.FormatCursor.
func parseCursor(q url.Values, name string) (audit.EventCursor, error) {
	s := q.Get(name)
	if s == "" {
		return audit.EventCursor{}, nil
	}
	at, id, ok := strings.Cut(s, "-")
	ns, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil || n <= 0 {
		return audit.EventCursor{}, audit.Errorf(audit.EINVALID, "%s: not a page cursor", name)
	}
	return audit.EventCursor{At: time.Unix(0, ns).UTC(), ID: n}, nil
}

// parseOptionalID reads an optional positive id parameter.
func parseOptionalID(q url.Values, name string) (int64, error) {
	if s := q.Get(name); s != "" {
		return parseID(name, s)
	}
	return 0, nil
}
