package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/history"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
	"github.com/leasewatch/leasewatch/web/present"
)

// maxHolder bounds a holder identity asked for, in characters: what a
// collector records of one.
const maxHolder = audit.MaxText

// atSpan is how far either side of ?at= the lock page's window reaches when
// the request gives no window.
const atSpan = time.Hour

// momentJSON is GET /api/v1/locks/{id}/at?t=: the lock at one instant.
type momentJSON struct {
	LockID int64         `json:"lock_id"`
	At     *string       `json:"at"`
	State  history.State `json:"state"`
	// Holder and Token are the current tenure's; "" and null when none was.
	Holder string      `json:"holder"`
	Token  *int64      `json:"token"`
	Tenure *tenureJSON `json:"tenure"`
	// Previous is, when no tenure was current, the one whose end the lock
	// was free since; FreeSince is that end.
	Previous  *tenureJSON `json:"previous"`
	FreeSince *string     `json:"free_since"`
	Blind     *blindJSON  `json:"blind"`
}

type blindJSON struct {
	From   *string `json:"from"`
	To     *string `json:"to"`
	Reason string  `json:"reason"`
}

// holderTenureJSON is one tenure of GET /api/v1/holders/{holder}/tenures:
// a tenure object with its lock and the findings of the lock while it
// lasted.
type holderTenureJSON struct {
	LockID   int64  `json:"lock_id"`
	Source   string `json:"source"`
	LockName string `json:"lock_name"`
	tenureJSON
	Findings        int  `json:"findings"`
	FindingsAtLeast bool `json:"findings_at_least"`
}

func (s *Server) handleAPILockAt(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	at, err := requiredTime(c.QueryParams(), "t")
	if err != nil {
		return err
	}
	m, err := s.query.LockAt(c.Request().Context(), id, at)
	if err != nil {
		return err
	}
	j := momentJSON{LockID: m.Lock.ID, At: jsonTime(m.At), State: m.State}
	if t := m.Tenure; t != nil {
		tj := toTenureJSON(*t)
		j.Holder, j.Token, j.Tenure = t.Holder, t.Token, &tj
	}
	if t := m.Previous; t != nil {
		tj := toTenureJSON(*t)
		j.Previous, j.FreeSince = &tj, jsonTime(t.EndedAt)
	}
	if b := m.Blind; b != nil {
		j.Blind = &blindJSON{From: jsonTime(b.From), To: jsonTime(b.To), Reason: b.Reason}
	}
	return c.JSON(http.StatusOK, j)
}

// requiredTime reads a time parameter that must be given, as parseTime
// reads the optional ones.
func requiredTime(q url.Values, name string) (time.Time, error) {
	t, err := parseTime(q, name)
	if err == nil && t.IsZero() {
		err = audit.Errorf(audit.EINVALID, "%s: required, an RFC 3339 time such as 2006-01-02T15:04:05Z", name)
	}
	return t, err
}

// pathHolder reads the :holder path parameter: a holder identity, escaped
// as a path segment (url.PathEscape). It must be valid UTF-8 of 1 to
// maxHolder characters.
func pathHolder(c echo.Context) (string, error) {
	h := c.Param("holder")
	// The router matched the escaped path when it had escapes the decoded
	// one cannot show (a %2F); else the segment is decoded already.
	if c.Request().URL.RawPath != "" {
		var err error
		if h, err = url.PathUnescape(h); err != nil {
			return "", audit.Errorf(audit.EINVALID, "holder: not a valid escaped path segment")
		}
	}
	switch {
	case h == "":
		return "", audit.Errorf(audit.EINVALID, "holder: must not be empty")
	case !utf8.ValidString(h):
		return "", audit.Errorf(audit.EINVALID, "holder: must be valid UTF-8")
	case utf8.RuneCountInString(h) > maxHolder:
		return "", audit.Errorf(audit.EINVALID, "holder: must be at most %d characters", maxHolder)
	}
	return h, nil
}

// parseHolderFilter reads the holder's tenures list parameters: from, to
// (on the grant time), limit and the before cursor.
func parseHolderFilter(c echo.Context, l listing) (audit.HolderFilter, error) {
	var f audit.HolderFilter
	var err error
	if f.Holder, err = pathHolder(c); err != nil {
		return f, err
	}
	q := c.QueryParams()
	if f.TimeFilter, err = parseTimeFilter(q, l); err != nil {
		return f, err
	}
	f.Before, err = parseTenureCursor(q, "before")
	return f, err
}

// parseTenureCursor reads a tenure cursor written by
// present.FormatTenureCursor.
func parseTenureCursor(q url.Values, name string) (audit.TenureCursor, error) {
	s := q.Get(name)
	if s == "" {
		return audit.TenureCursor{}, nil
	}
	parts := strings.Split(s, "-")
	var n [3]int64
	ok := len(parts) == 3
	for i := 0; ok && i < 3; i++ {
		var err error
		n[i], err = strconv.ParseInt(parts[i], 10, 64)
		ok = err == nil && (i == 0 || n[i] > 0)
	}
	if !ok {
		return audit.TenureCursor{}, audit.Errorf(audit.EINVALID, "%s: not a page cursor", name)
	}
	return audit.TenureCursor{GrantedAt: time.Unix(0, n[0]).UTC(), LockID: n[1], Seq: n[2]}, nil
}

func (s *Server) handleAPIHolderTenures(c echo.Context) error {
	f, err := parseHolderFilter(c, otherAPI)
	if err != nil {
		return err
	}
	h, err := s.query.Holder(c.Request().Context(), f, s.now())
	if err != nil {
		return err
	}
	out := make([]holderTenureJSON, 0, len(h.Tenures))
	for _, t := range h.Tenures {
		out = append(out, holderTenureJSON{LockID: t.LockID, Source: t.Lock.Source, LockName: t.Lock.Name,
			tenureJSON: toTenureJSON(t.Tenure), Findings: t.Findings, FindingsAtLeast: t.FindingsAtLeast})
	}
	var next *string
	if cur := present.FormatTenureCursor(h.Next); cur != "" {
		next = &cur
	}
	return c.JSON(http.StatusOK, map[string]any{"holder": h.Holder, "tenures": out, "next": next})
}

func (s *Server) handleHolderPage(c echo.Context) error {
	f, err := parseHolderFilter(c, holderPage)
	if err != nil {
		return err
	}
	loc, err := parseZone(c.QueryParams())
	if err != nil {
		return err
	}
	now := s.now()
	h, err := s.query.Holder(c.Request().Context(), f, now)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Holder(present.Holder(request(c, now, loc), f, h)))
}

// parseLockWindow reads the lock page's window and its instant at (zero
// when not given): with at and no window, the window is at ± atSpan.
func parseLockWindow(q url.Values, now time.Time, loc *time.Location) (query.Window, time.Time, error) {
	at, err := parseWindowTime(q, "at", loc)
	if err != nil {
		return query.Window{}, at, err
	}
	if !at.IsZero() && q.Get("window") == "" && q.Get("from") == "" && q.Get("to") == "" {
		return query.Window{From: at.Add(-atSpan), To: at.Add(atSpan)}, at, nil
	}
	w, err := parseWindow(q, now, loc)
	return w, at, err
}
