package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// How much each page shows at most. Lists beyond these say so and point at
// filters.
const (
	pageLocks    = 1000
	pageEvents   = 200
	pageTenures  = 100
	pageFindings = 500
)

// render writes a templ component as an HTML response. It renders into a
// buffer first, so a failing component yields a clean 500 instead of half a
// page.
func render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return fmt.Errorf("render %s: %w", c.Path(), err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

func (s *Server) handleLocksPage(c echo.Context) error {
	q := c.QueryParams()
	lq, err := parseLockQuery(q)
	if err != nil {
		return err
	}
	// Heartbeats are recorded but kept out of the default view.
	class := q.Get("class")
	switch class {
	case "":
		lq.Class = audit.ClassLock
	case "all":
		lq.Class = ""
	case string(audit.ClassLock), string(audit.ClassHeartbeat):
		lq.Class = audit.Class(class)
	default:
		return audit.Errorf(audit.EINVALID, `class: must be "lock", "heartbeat" or "all"`)
	}
	limit := lq.Limit
	if limit == 0 {
		limit = pageLocks
	}
	lq.Limit = limit + 1

	ctx := c.Request().Context()
	locks, err := s.locks(ctx, lq)
	if err != nil {
		return err
	}
	truncated := len(locks) > limit
	if truncated {
		locks = locks[:limit]
	}
	sources, err := s.sourceHealth(ctx)
	if err != nil {
		return err
	}

	now := s.now()
	p := views.LocksPage{
		Filter: views.LockFilter{
			Source: lq.Source,
			Q:      lq.Q,
			Class:  class,
			State:  string(lq.State),
		},
		Truncated: truncated,
		Limit:     limit,
		Now:       stamp(now),
	}
	for _, src := range sources {
		p.Sources = append(p.Sources, src.Name)
	}
	if lq.Source != "" && !slices.Contains(p.Sources, lq.Source) {
		// Keep a filter from a shared URL visible even if that source is gone.
		p.Sources = append(p.Sources, lq.Source)
	}
	for _, l := range locks {
		p.Locks = append(p.Locks, views.LockRow{
			ID:         l.ID,
			Source:     l.Source,
			Name:       l.Name,
			Class:      string(l.Class),
			State:      string(l.State),
			Holder:     l.Holder,
			Token:      token(l.Token),
			Acquired:   stamp(l.AcquiredAt),
			Renewed:    stamp(l.RenewedAt),
			ExpiresIn:  expiresIn(l, now),
			NearExpiry: s.nearExpiry(l, now),
		})
	}
	return render(c, http.StatusOK, views.Locks(p))
}

func (s *Server) handleLockPage(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ef, err := parseEventFilter(c.QueryParams())
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	l, err := s.store.Lock(ctx, id)
	if err != nil {
		return err
	}

	eventLimit := ef.Limit
	if eventLimit == 0 {
		eventLimit = pageEvents
	}
	ef.Limit = eventLimit + 1
	events, err := s.store.Events(ctx, id, ef)
	if err != nil {
		return err
	}
	events, eventsTrimmed := newest(events, eventLimit)

	tenures, err := s.store.Tenures(ctx, id, audit.TimeFilter{Limit: pageTenures + 1})
	if err != nil {
		return err
	}
	tenures, tenuresTrimmed := newest(tenures, pageTenures)

	findings, err := s.store.Findings(ctx, audit.FindingFilter{
		TimeFilter: audit.TimeFilter{Limit: pageFindings + 1},
		LockID:     id,
	})
	if err != nil {
		return err
	}
	findings, findingsTrimmed := newest(findings, pageFindings)

	now := s.now()
	q := c.QueryParams()
	p := views.LockPage{
		Lock: views.LockSummary{
			ID:            l.ID,
			Source:        l.Source,
			Kind:          string(l.Kind),
			Name:          l.Name,
			Class:         string(l.Class),
			State:         string(l.State),
			Holder:        l.Holder,
			Token:         token(l.Token),
			LeaseDuration: duration(l.LeaseDuration),
			Acquired:      stamp(l.AcquiredAt),
			Renewed:       stamp(l.RenewedAt),
			Expires:       stamp(l.ExpiresAt),
			ExpiresIn:     expiresIn(l, now),
			NearExpiry:    s.nearExpiry(l, now),
			Changed:       stamp(l.ChangedAt),
		},
		TenuresTrimmed:  tenuresTrimmed,
		FindingsTrimmed: findingsTrimmed,
		EventsTrimmed:   eventsTrimmed,
		EventFilter: views.EventFilter{
			Kind: string(ef.Kind),
			From: q.Get("from"),
			To:   q.Get("to"),
		},
	}
	for _, k := range audit.EventKinds {
		p.EventKinds = append(p.EventKinds, string(k))
	}
	for _, t := range slices.Backward(tenures) {
		end := string(t.End)
		if t.Held() {
			end = "held"
		}
		p.Tenures = append(p.Tenures, views.TenureRow{
			Seq:           t.Seq,
			Holder:        t.Holder,
			Token:         token(t.Token),
			Granted:       stamp(t.GrantedAt),
			Observed:      t.Observed,
			Renewals:      t.Renewals,
			LastRenewed:   stamp(t.LastRenewedAt),
			LeaseDuration: duration(t.LeaseDuration),
			Expires:       stamp(t.ExpiresAt),
			Ended:         stamp(t.EndedAt),
			End:           end,
		})
	}
	for _, f := range slices.Backward(findings) {
		p.Findings = append(p.Findings, findingRow(f))
	}
	for _, e := range slices.Backward(events) {
		p.Events = append(p.Events, views.EventRow{
			ID:       e.ID,
			Kind:     string(e.Kind),
			At:       stamp(e.At),
			Holder:   e.Holder,
			Token:    token(e.Token),
			TTL:      duration(e.TTL),
			Position: e.Position,
			Inferred: e.Inferred,
			Resource: e.Resource,
			Detail:   detailFields(e),
		})
	}
	return render(c, http.StatusOK, views.Lock(p))
}

func (s *Server) handleFindingsPage(c echo.Context) error {
	f, err := s.parseFindingFilter(c)
	if err != nil {
		return err
	}
	limit := f.Limit
	if limit == 0 {
		limit = pageFindings
	}
	f.Limit = limit + 1
	findings, err := s.store.Findings(c.Request().Context(), f)
	if err != nil {
		return err
	}
	findings, truncated := newest(findings, limit)

	q := c.QueryParams()
	p := views.FindingsPage{
		Filter: views.FindingFilter{
			Kind:     string(f.Kind),
			Severity: string(f.Severity),
			Lock:     q.Get("lock"),
			Resource: f.Resource,
		},
		Truncated:  truncated,
		Limit:      limit,
		Severities: []string{string(audit.SeverityCritical), string(audit.SeverityWarning), string(audit.SeverityInfo)},
	}
	for _, k := range audit.FindingKinds {
		p.Kinds = append(p.Kinds, string(k))
	}
	for _, fd := range slices.Backward(findings) {
		p.Findings = append(p.Findings, findingRow(fd))
	}
	return render(c, http.StatusOK, views.Findings(p))
}

func (s *Server) handleSourcesPage(c echo.Context) error {
	sources, err := s.sourceHealth(c.Request().Context())
	if err != nil {
		return err
	}
	var p views.SourcesPage
	for _, src := range sources {
		p.Sources = append(p.Sources, views.SourceRow{
			Name:       src.Name,
			Kind:       string(src.Kind),
			State:      src.State,
			LastEvent:  stamp(src.LastEventAt),
			BlindSince: stamp(src.BlindSince),
			Error:      src.Error,
		})
	}
	return render(c, http.StatusOK, views.Sources(p))
}

// newest keeps the last n items of a list in time order (the store returns
// the newest when asked for one more than n) and says whether it dropped any.
func newest[T any](items []T, n int) ([]T, bool) {
	if len(items) <= n {
		return items, false
	}
	return items[len(items)-n:], true
}

func findingRow(f audit.Finding) views.FindingRow {
	lock := f.Lock.String()
	if f.Lock.Source == "" && f.Lock.Name == "" {
		lock = "#" + strconv.FormatInt(f.LockID, 10)
	}
	row := views.FindingRow{
		ID:       f.ID,
		LockID:   f.LockID,
		Lock:     lock,
		Kind:     string(f.Kind),
		Severity: string(f.Severity),
		At:       stamp(f.At),
		Until:    stamp(f.Until),
		Summary:  f.Summary,
		Holders:  strings.Join(f.Holders, ", "),
		Resource: f.Resource,
	}
	tokens := make([]string, len(f.Tokens))
	for i, t := range f.Tokens {
		tokens[i] = strconv.FormatInt(t, 10)
	}
	row.Tokens = strings.Join(tokens, ", ")
	if !f.Until.IsZero() && f.Until.After(f.At) {
		row.Duration = duration(f.Until.Sub(f.At))
	}
	return row
}

// detailFields renders an event's detail as key=value pairs in key order.
// Strings appear as they are; other values as JSON.
func detailFields(e audit.Event) []views.Field {
	fields := make([]views.Field, 0, len(e.Detail))
	for _, k := range slices.Sorted(maps.Keys(e.Detail)) {
		var v string
		switch x := e.Detail[k].(type) {
		case string:
			v = x
		default:
			b, err := json.Marshal(x)
			if err != nil {
				v = fmt.Sprint(x)
			} else {
				v = string(b)
			}
		}
		fields = append(fields, views.Field{Key: k, Value: v})
	}
	return fields
}

// nearExpiry reports whether a held lock has less than the renew margin of its
// lease left (or is past its expiry without having been released).
func (s *Server) nearExpiry(l audit.Lock, now time.Time) bool {
	if s.margin == 0 || l.State != audit.StateHeld || l.ExpiresAt.IsZero() || l.LeaseDuration <= 0 {
		return false
	}
	left := l.ExpiresAt.Sub(now)
	return float64(left) < s.margin*float64(l.LeaseDuration)
}

// expiresIn says how long a held lock's lease has left, or how long ago it ran out.
func expiresIn(l audit.Lock, now time.Time) string {
	if l.State != audit.StateHeld || l.ExpiresAt.IsZero() {
		return ""
	}
	left := l.ExpiresAt.Sub(now)
	if left < 0 {
		return duration(-left) + " ago"
	}
	return duration(left)
}

// stamp formats t for pages, in UTC to millisecond precision.
func stamp(t time.Time) views.Stamp {
	if t.IsZero() {
		return views.Stamp{}
	}
	t = t.UTC()
	return views.Stamp{
		Text: t.Format("2006-01-02 15:04:05.000Z"),
		ISO:  t.Format(time.RFC3339Nano),
	}
}

func token(t *int64) string {
	if t == nil {
		return ""
	}
	return strconv.FormatInt(*t, 10)
}

// duration formats d compactly: milliseconds under a minute, seconds above.
func duration(d time.Duration) string {
	switch {
	case d == 0:
		return ""
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
