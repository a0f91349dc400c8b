package web

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
)

// JSON shapes of the API (docs/http-api.md, web/openapi.yaml). Field names are a contract:
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
	sources, err := s.query.Sources(c.Request().Context())
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
	// Additions to the contract: kind, holder, sort and keyset cursors,
	// as on the locks page.
	lq, err := parseLockQuery(q, locksAPI, s.kinds)
	if err != nil {
		return err
	}
	pg, err := s.query.Locks(c.Request().Context(), query.LocksQuery{Filter: lq.LockFilter, Limit: lq.Limit})
	if err != nil {
		return err
	}
	out := make([]lockJSON, 0, len(pg.Locks))
	for _, l := range pg.Locks {
		out = append(out, toKeptLockJSON(l))
	}
	return c.JSON(http.StatusOK, map[string]any{"locks": out})
}

// toKeptLockJSON is l with its kept verdict.
func toKeptLockJSON(l query.KeptLock) lockJSON {
	j := toLockJSON(l.Lock)
	j.Verdict = l.Verdict
	return j
}

func (s *Server) handleAPILock(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	l, err := s.query.Lock(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toKeptLockJSON(l))
}

func (s *Server) handleAPIEvents(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	f, err := parseEventFilter(c.QueryParams(), otherAPI)
	if err != nil {
		return err
	}
	page, err := s.query.Events(c.Request().Context(), id, f, f.Limit)
	if err != nil {
		return err
	}
	out := make([]eventJSON, 0, len(page.Events))
	for _, e := range page.Events {
		out = append(out, toEventJSON(e))
	}
	var next *string
	if page.Older {
		next = cursorOf(page.Events[0].At, page.Events[0].ID)
	}
	return c.JSON(http.StatusOK, map[string]any{"events": out, "next": next})
}

func (s *Server) handleAPITenures(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	f, err := parseTimeFilter(c.QueryParams(), otherAPI)
	if err != nil {
		return err
	}
	tenures, err := s.query.Tenures(c.Request().Context(), id, f)
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
	fq, err := parseFindingsQuery(c.QueryParams(), findingsAPI)
	if err != nil {
		return err
	}
	page, err := s.query.Findings(c.Request().Context(), fq)
	if err != nil {
		return err
	}
	out := make([]findingJSON, 0, len(page.Findings))
	for _, fd := range page.Findings {
		out = append(out, toFindingJSON(fd))
	}
	var next *string
	if page.Older {
		next = cursorOf(page.Findings[0].At, page.Findings[0].ID)
	}
	return c.JSON(http.StatusOK, map[string]any{"findings": out, "next": next})
}
