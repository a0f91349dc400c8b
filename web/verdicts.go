package web

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/views"
)

// The kept verdicts (audit/verdict Keeper: each lock's verdict over the
// last 24 hours) in the locks list, the API's lock lists and the overview.

// parseVerdict reads verdict=, a kept verdict to filter locks by.
func parseVerdict(q url.Values) (string, error) {
	v := q.Get("verdict")
	if v == "" || verdict.Kind(v).Valid() {
		return v, nil
	}
	names := make([]string, len(verdict.Kinds))
	for i, k := range verdict.Kinds {
		names[i] = `"` + string(k) + `"`
	}
	return "", audit.Errorf(audit.EINVALID, "verdict: must be %s", strings.Join(names, ", "))
}

// keptVerdicts returns the kept verdicts of locks, by lock id.
func (s *Server) keptVerdicts(ctx context.Context, locks []audit.Lock) (map[int64]audit.LockVerdict, error) {
	ids := make([]int64, len(locks))
	for i, l := range locks {
		ids[i] = l.ID
	}
	return s.store.Verdicts(ctx, ids)
}

// lockRows returns the table rows of locks, with their kept verdicts.
func (s *Server) lockRows(ctx context.Context, locks []audit.Lock, now time.Time, loc *time.Location) ([]views.LockRow, error) {
	kept, err := s.keptVerdicts(ctx, locks)
	if err != nil {
		return nil, err
	}
	rows := make([]views.LockRow, 0, len(locks))
	for _, l := range locks {
		row := s.lockRow(l, now, loc)
		row.Verdict = kept[l.ID].Verdict
		rows = append(rows, row)
	}
	return rows, nil
}

// verdictCounts returns the overview's count of locks of class per kept
// verdict, in verdict order, each linked to the locks list filtered by it.
func (s *Server) verdictCounts(ctx context.Context, class audit.Class) ([]views.VerdictCount, error) {
	counts, err := s.store.VerdictCounts(ctx, class)
	if err != nil {
		return nil, err
	}
	out := make([]views.VerdictCount, 0, len(verdict.Kinds))
	for _, k := range verdict.Kinds {
		out = append(out, views.VerdictCount{Kind: string(k), N: counts[string(k)],
			URL: "/locks?" + url.Values{"verdict": {string(k)}}.Encode()})
	}
	return out, nil
}

// The choices of the locks list's kind and verdict filters.
var (
	lockKinds    = names(audit.SourceKinds)
	verdictNames = names(verdict.Kinds)
)

// names returns the names of a contract's values, in their order.
func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
