package query

import (
	"context"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// SourcesSpan is how far back the sources page lists blind windows.
const SourcesSpan = 30 * 24 * time.Hour

// sourcesBlindLimit caps the blind windows one page reads.
const sourcesBlindLimit = 200

// SourceStatus is a source's health and what the store holds of it.
type SourceStatus struct {
	audit.Source
	// Locks counts its locks, heartbeats included.
	Locks int
	// Cursor is where its collector resumes; HasCursor false when none is
	// stored.
	Cursor    audit.Cursor
	HasCursor bool
	// Blinds counts its blind windows since the view's Since.
	Blinds int
}

// Sources is the sources page: every source's status, and the blind windows
// since Since, oldest first (at most sourcesBlindLimit).
type Sources struct {
	Since    time.Time
	Statuses []SourceStatus
	Blinds   []audit.BlindWindow
}

// Down counts the sources that are not up.
func (v Sources) Down() int {
	n := 0
	for _, s := range v.Statuses {
		if s.State != audit.SourceUp {
			n++
		}
	}
	return n
}

// SourcesPage reads the sources page at now.
func (r *Reader) SourcesPage(ctx context.Context, now time.Time) (Sources, error) {
	counts, err := r.store.LockCounts(ctx)
	if err != nil {
		return Sources{}, err
	}
	return r.sourcesSince(ctx, now.Add(-SourcesSpan), counts)
}

// sourcesSince reads every source's status, with its locks from counts
// and its blind windows since since.
func (r *Reader) sourcesSince(ctx context.Context, since time.Time, counts []audit.LockCount) (Sources, error) {
	sources, err := r.Sources(ctx)
	if err != nil {
		return Sources{}, err
	}
	cursors, err := r.store.Cursors(ctx)
	if err != nil {
		return Sources{}, err
	}
	blinds, err := r.store.BlindWindows(ctx, audit.BlindFilter{TimeFilter: audit.TimeFilter{From: since, Limit: sourcesBlindLimit}})
	if err != nil {
		return Sources{}, err
	}
	locks := map[string]int{}
	for _, n := range counts {
		locks[n.Source] += n.N
	}
	blindCount := map[string]int{}
	for _, b := range blinds {
		blindCount[b.Source]++
	}
	cursorOf := map[string]audit.Cursor{}
	for _, cur := range cursors {
		cursorOf[cur.Source] = cur
	}
	v := Sources{Since: since, Blinds: blinds}
	for _, src := range sources {
		cur, ok := cursorOf[src.Name]
		v.Statuses = append(v.Statuses, SourceStatus{Source: src, Locks: locks[src.Name],
			Cursor: cur, HasCursor: ok, Blinds: blindCount[src.Name]})
	}
	return v, nil
}
