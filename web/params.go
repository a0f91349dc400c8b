package web

import (
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
)

// maxLimit caps limit on every list so one request cannot ask for the whole
// database at once.
const maxLimit = 10000

// pathID parses the :id path parameter.
func pathID(c echo.Context) (int64, error) {
	return parseID("id", c.Param("id"))
}

// parseID parses a lock id named name.
func parseID(name, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, audit.Errorf(audit.EINVALID, "%s: must be a positive integer", name)
	}
	return id, nil
}

// parseTimeFilter reads from, to and limit.
func parseTimeFilter(q url.Values) (audit.TimeFilter, error) {
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
	if f.Limit, err = parseLimit(q); err != nil {
		return f, err
	}
	return f, nil
}

// parseTime reads an optional RFC 3339 time parameter.
func parseTime(q url.Values, name string) (time.Time, error) {
	s := q.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, audit.Errorf(audit.EINVALID, "%s: must be an RFC 3339 time such as 2006-01-02T15:04:05Z", name)
	}
	return t.UTC(), nil
}

// parseLimit reads an optional positive limit; above maxLimit it is capped.
// Zero means none was given.
func parseLimit(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		if err != nil && isDigits(s) { // too large for an int: still a positive integer
			return maxLimit, nil
		}
		return 0, audit.Errorf(audit.EINVALID, "limit: must be a positive integer")
	}
	return min(n, maxLimit), nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// parseClass reads the class parameter of the API: empty (every class), lock
// or heartbeat.
func parseClass(q url.Values) (audit.Class, error) {
	switch c := audit.Class(q.Get("class")); c {
	case "", audit.ClassLock, audit.ClassHeartbeat:
		return c, nil
	default:
		return "", audit.Errorf(audit.EINVALID, `class: must be "lock" or "heartbeat"`)
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

// lockQuery is a parsed locks request. Window selects locks by their last
// change; the store has no time filter for locks, so it is applied here.
type lockQuery struct {
	audit.LockFilter
	Window audit.TimeFilter
}

// parseLockQuery reads the locks list parameters. class is parsed by the
// caller: the API and the page treat an empty class differently.
func parseLockQuery(q url.Values) (lockQuery, error) {
	var lq lockQuery
	var err error
	if lq.Window, err = parseTimeFilter(q); err != nil {
		return lq, err
	}
	if lq.State, err = parseState(q); err != nil {
		return lq, err
	}
	lq.Source = q.Get("source")
	lq.Name = q.Get("name")
	lq.Q = q.Get("q")
	lq.Limit = lq.Window.Limit
	return lq, nil
}

// parseEventFilter reads a lock's event list parameters.
func parseEventFilter(q url.Values) (audit.EventFilter, error) {
	var f audit.EventFilter
	var err error
	if f.TimeFilter, err = parseTimeFilter(q); err != nil {
		return f, err
	}
	if k := audit.EventKind(q.Get("kind")); k != "" {
		if !k.Valid() {
			return f, audit.Errorf(audit.EINVALID, "kind: unknown event kind %q", truncate(string(k), 64))
		}
		f.Kind = k
	}
	return f, nil
}

// parseFindingFilter reads the findings list parameters. A lock id is checked
// to exist, so a typo answers 404 rather than an empty list.
func (s *Server) parseFindingFilter(c echo.Context) (audit.FindingFilter, error) {
	q := c.QueryParams()
	var f audit.FindingFilter
	var err error
	if f.TimeFilter, err = parseTimeFilter(q); err != nil {
		return f, err
	}
	if k := audit.FindingKind(q.Get("kind")); k != "" {
		if !k.Valid() {
			return f, audit.Errorf(audit.EINVALID, "kind: unknown finding kind %q", truncate(string(k), 64))
		}
		f.Kind = k
	}
	if sev := audit.Severity(q.Get("severity")); sev != "" {
		if !sev.Valid() {
			return f, audit.Errorf(audit.EINVALID, `severity: must be "critical", "warning" or "info"`)
		}
		f.Severity = sev
	}
	f.Resource = q.Get("resource")
	if v := q.Get("lock"); v != "" {
		if f.LockID, err = parseID("lock", v); err != nil {
			return f, err
		}
		if _, err := s.store.Lock(c.Request().Context(), f.LockID); err != nil {
			return f, err
		}
	}
	return f, nil
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
