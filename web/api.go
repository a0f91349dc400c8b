package web

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
)

// JSON shapes of the API (README.md, "HTTP API"). Field names are a contract:
// add fields, never rename or remove them.

type sourceJSON struct {
	Name        string           `json:"name"`
	Kind        audit.SourceKind `json:"kind"`
	State       string           `json:"state"`
	LastEventAt *string          `json:"last_event_at"`
	BlindSince  *string          `json:"blind_since"`
	Error       string           `json:"error"`
	Degraded    string           `json:"degraded"`           // why the collector sees less than it could; "" when it does not
	LagMS       *int64           `json:"observation_lag_ms"` // of the source's latest commit (audit.Source.Lag); null before the first
	LagAt       *string          `json:"observation_lag_at"` // when that commit was
}

type lockJSON struct {
	ID              int64            `json:"id"`
	Source          string           `json:"source"`
	Kind            audit.SourceKind `json:"kind"`
	Name            string           `json:"name"`
	Class           audit.Class      `json:"class"`
	State           audit.LockState  `json:"state"`
	Holder          string           `json:"holder"`
	Token           *int64           `json:"token"`
	AcquiredAt      *string          `json:"acquired_at"`
	RenewedAt       *string          `json:"renewed_at"`
	ExpiresAt       *string          `json:"expires_at"`
	LeaseDurationMS *int64           `json:"lease_duration_ms"`
	ChangedAt       *string          `json:"changed_at"`
	// Verdict is the lock's kept safety verdict over the last 24 hours
	// (audit/verdict Keeper); absent when not judged yet. An addition to
	// the contract.
	Verdict string `json:"verdict,omitempty"`
}

type eventJSON struct {
	ID        int64           `json:"id"`
	Kind      audit.EventKind `json:"kind"`
	At        *string         `json:"at"`
	Holder    string          `json:"holder"`
	Token     *int64          `json:"token"`
	TTLMS     *int64          `json:"ttl_ms"`
	Position  string          `json:"position"`
	Inferred  bool            `json:"inferred"`
	Resource  string          `json:"resource"`
	RequestID string          `json:"request_id"`
	Detail    map[string]any  `json:"detail"`
}

type tenureJSON struct {
	Seq             int64            `json:"seq"`
	Holder          string           `json:"holder"`
	Token           *int64           `json:"token"`
	GrantedAt       *string          `json:"granted_at"` // null for a tenure already held when the collector started
	Observed        bool             `json:"observed"`
	FirstSeenAt     *string          `json:"first_seen_at"`
	Renewals        int64            `json:"renewals"`
	LastRenewedAt   *string          `json:"last_renewed_at"`
	LeaseDurationMS *int64           `json:"lease_duration_ms"`
	ExpiresAt       *string          `json:"expires_at"`
	EndedAt         *string          `json:"ended_at"`
	End             *audit.EndReason `json:"end"`
	// PrunedRenewals summarises the renewals retention deleted; null when
	// none were. Renewals still counts them.
	PrunedRenewals *prunedJSON `json:"pruned_renewals"`
}

type prunedJSON struct {
	Renewals       int64    `json:"renewals"`
	First          *string  `json:"first"`
	Last           *string  `json:"last"`
	MinMarginRatio *float64 `json:"min_margin_ratio"`
}

type findingJSON struct {
	ID       int64             `json:"id"`
	LockID   int64             `json:"lock_id"`
	Source   string            `json:"source"`
	LockName string            `json:"lock_name"`
	Kind     audit.FindingKind `json:"kind"`
	Severity audit.Severity    `json:"severity"`
	At       *string           `json:"at"`
	Until    *string           `json:"until"`
	Summary  string            `json:"summary"`
	Tokens   []int64           `json:"tokens"`
	Holders  []string          `json:"holders"`
	Resource string            `json:"resource"`
}

// jsonTime formats t as RFC 3339 with nanoseconds in UTC; zero is null.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// jsonMS renders a duration as integer milliseconds; zero (unknown) is null.
func jsonMS(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

func toLockJSON(l audit.Lock) lockJSON {
	return lockJSON{
		ID:              l.ID,
		Source:          l.Source,
		Kind:            l.Kind,
		Name:            l.Name,
		Class:           l.Class,
		State:           l.State,
		Holder:          l.Holder,
		Token:           l.Token,
		AcquiredAt:      jsonTime(l.AcquiredAt),
		RenewedAt:       jsonTime(l.RenewedAt),
		ExpiresAt:       jsonTime(l.ExpiresAt),
		LeaseDurationMS: jsonMS(l.LeaseDuration),
		ChangedAt:       jsonTime(l.ChangedAt),
	}
}

func toEventJSON(e audit.Event) eventJSON {
	detail := e.Detail
	if len(detail) == 0 {
		detail = nil
	}
	return eventJSON{
		ID:        e.ID,
		Kind:      e.Kind,
		At:        jsonTime(e.At),
		Holder:    e.Holder,
		Token:     e.Token,
		TTLMS:     jsonMS(e.TTL),
		Position:  e.Position,
		Inferred:  e.Inferred,
		Resource:  e.Resource,
		RequestID: e.RequestID,
		Detail:    detail,
	}
}

func toTenureJSON(t audit.Tenure) tenureJSON {
	j := tenureJSON{
		Seq:             t.Seq,
		Holder:          t.Holder,
		Token:           t.Token,
		Observed:        t.Observed,
		Renewals:        t.Renewals,
		LastRenewedAt:   jsonTime(t.LastRenewedAt),
		LeaseDurationMS: jsonMS(t.LeaseDuration),
		ExpiresAt:       jsonTime(t.ExpiresAt),
		EndedAt:         jsonTime(t.EndedAt),
	}
	if t.Observed {
		j.FirstSeenAt = jsonTime(t.GrantedAt)
	} else {
		j.GrantedAt = jsonTime(t.GrantedAt)
		j.FirstSeenAt = j.GrantedAt
	}
	if t.End != "" {
		end := t.End
		j.End = &end
	}
	if p := t.Pruned; p != nil {
		j.PrunedRenewals = &prunedJSON{Renewals: p.Renewals, First: jsonTime(p.First), Last: jsonTime(p.Last), MinMarginRatio: p.MinMarginRatio}
	}
	return j
}

func toFindingJSON(f audit.Finding) findingJSON {
	j := findingJSON{
		ID:       f.ID,
		LockID:   f.LockID,
		Source:   f.Lock.Source,
		LockName: f.Lock.Name,
		Kind:     f.Kind,
		Severity: f.Severity,
		At:       jsonTime(f.At),
		Until:    jsonTime(f.Until),
		Summary:  f.Summary,
		Tokens:   f.Tokens,
		Holders:  f.Holders,
		Resource: f.Resource,
	}
	if j.Tokens == nil {
		j.Tokens = []int64{}
	}
	if j.Holders == nil {
		j.Holders = []string{}
	}
	return j
}

func (s *Server) handleAPISources(c echo.Context) error {
	sources, err := s.sourceHealth(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]sourceJSON, 0, len(sources))
	for _, src := range sources {
		sj := sourceJSON{
			Name:        src.Name,
			Kind:        src.Kind,
			State:       src.State,
			LastEventAt: jsonTime(src.LastEventAt),
			BlindSince:  jsonTime(src.BlindSince),
			Error:       src.Error,
			Degraded:    src.Degraded,
			LagAt:       jsonTime(src.LagAt),
		}
		if !src.LagAt.IsZero() {
			ms := src.Lag.Milliseconds() // 0 is a measured lag here, not unknown
			sj.LagMS = &ms
		}
		out = append(out, sj)
	}
	return c.JSON(http.StatusOK, map[string]any{"sources": out})
}

func (s *Server) handleAPILocks(c echo.Context) error {
	q := c.QueryParams()
	lq, err := parseLockQuery(q)
	if err != nil {
		return err
	}
	if lq.Class, err = parseClass(q, ""); err != nil {
		return err
	}
	// Additions to the contract: kind, holder, sort and keyset cursors,
	// as on the locks page.
	if err := parseLockPage(q, &lq); err != nil {
		return err
	}
	ctx := c.Request().Context()
	locks, err := s.store.Locks(ctx, lq.LockFilter)
	if err != nil {
		return err
	}
	kept, err := s.keptVerdicts(ctx, locks)
	if err != nil {
		return err
	}
	out := make([]lockJSON, 0, len(locks))
	for _, l := range locks {
		j := toLockJSON(l)
		j.Verdict = kept[l.ID].Verdict
		out = append(out, j)
	}
	return c.JSON(http.StatusOK, map[string]any{"locks": out})
}

func (s *Server) handleAPILock(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	l, err := s.store.Lock(ctx, id)
	if err != nil {
		return err
	}
	kept, err := s.keptVerdicts(ctx, []audit.Lock{l})
	if err != nil {
		return err
	}
	j := toLockJSON(l)
	j.Verdict = kept[l.ID].Verdict
	return c.JSON(http.StatusOK, j)
}

func (s *Server) handleAPIEvents(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	f, err := parseEventFilter(c.QueryParams())
	if err != nil {
		return err
	}
	events, err := s.store.Events(c.Request().Context(), id, f)
	if err != nil {
		return err
	}
	out := make([]eventJSON, 0, len(events))
	var oldest audit.EventCursor
	for i, e := range events {
		if i == 0 {
			oldest = audit.EventCursor{At: e.At, ID: e.ID}
		}
		out = append(out, toEventJSON(e))
	}
	return c.JSON(http.StatusOK, map[string]any{"events": out, "next": nextCursor(len(events), f.Limit, oldest)})
}

func (s *Server) handleAPITenures(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	f, err := parseTimeFilter(c.QueryParams())
	if err != nil {
		return err
	}
	tenures, err := s.store.Tenures(c.Request().Context(), id, f)
	if err != nil {
		return err
	}
	out := make([]tenureJSON, 0, len(tenures))
	for _, t := range tenures {
		out = append(out, toTenureJSON(t))
	}
	return c.JSON(http.StatusOK, map[string]any{"tenures": out})
}

func (s *Server) handleAPIFindings(c echo.Context) error {
	f, err := s.parseFindingFilter(c)
	if err != nil {
		return err
	}
	findings, err := s.store.Findings(c.Request().Context(), f)
	if err != nil {
		return err
	}
	out := make([]findingJSON, 0, len(findings))
	var oldest audit.EventCursor
	for i, fd := range findings {
		if i == 0 {
			oldest = audit.EventCursor{At: fd.At, ID: fd.ID}
		}
		out = append(out, toFindingJSON(fd))
	}
	return c.JSON(http.StatusOK, map[string]any{"findings": out, "next": nextCursor(len(findings), f.Limit, oldest)})
}

// sourceHealth returns the sources with their collectors' health and each
// one's newest event from the store, ordered by name.
func (s *Server) sourceHealth(ctx context.Context) ([]audit.Source, error) {
	var sources []audit.Source
	if s.sources != nil {
		sources = slices.Clone(s.sources())
	} else {
		for name, kind := range s.known {
			sources = append(sources, audit.Source{Name: name, Kind: kind, State: audit.SourceDown})
		}
	}
	last, err := s.store.LastEventAt(ctx)
	switch {
	case audit.ErrorCode(err) == audit.EUNAVAILABLE && ctx.Err() == nil:
		// A database that is down is when source health matters most:
		// answer with what the collectors know.
		s.logger.Warn("source health without the stored last events", "err", err)
	case err != nil:
		return nil, err
	}
	for i := range sources {
		if t, ok := last[sources[i].Name]; ok && t.After(sources[i].LastEventAt) {
			sources[i].LastEventAt = t
		}
		if sources[i].State == "" {
			sources[i].State = audit.SourceDown
		}
	}
	slices.SortFunc(sources, func(a, b audit.Source) int { return strings.Compare(a.Name, b.Name) })
	return sources, nil
}
