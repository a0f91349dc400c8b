// Package query is the dashboard's query layer. It reads from the store what
// each page and each JSON API endpoint shows, and returns it as plain data:
// audit types, counts and flags, never markup. The handlers in web parse a
// request, make one call here and render what comes back, so that a page and
// the API endpoint beside it read the same rows the same way and cannot
// disagree.
//
// The incident review (audit/review), a lock's safety verdict
// (audit/verdict) and who held what when (audit/history) are the query
// layer's other parts; this package puts them together for the pages.
package query

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// Config is what a Reader needs. Only Store is required.
type Config struct {
	// Store answers every read. Its type makes the fresh overlay of
	// unsynced renewals a given: only audit.Recorder.Fresh or
	// audit.Settled make one.
	Store audit.Reads
	// Sources returns the configured sources with their collectors' health.
	// Nil lists KnownSources as down: no collector runs for them.
	Sources func() []audit.Source
	// KnownSources are the configured sources by name.
	KnownSources map[string]audit.SourceKind
	// RenewMarginRatio is the share of a lease left under which a held
	// lock is near its expiry (alerts.renew_margin_ratio). Zero: none is.
	RenewMarginRatio float64
	// Purposes say which locks only avoid duplicate work, for verdicts.
	Purposes verdict.Purposes
	// Logger defaults to discarding.
	Logger *slog.Logger
}

// A Reader answers the dashboard's and the API's reads. It is safe for
// concurrent use.
type Reader struct {
	store    audit.Reads
	sources  func() []audit.Source
	known    map[string]audit.SourceKind
	margin   float64
	purposes verdict.Purposes
	logger   *slog.Logger
	verdicts *verdictCache // the lock page's
	costs    *costCache    // each window's writes (Costs)
	// overviews shares an overview's reading among the requests that ask
	// while it is under way; overviewWaiting counts those waiting for one.
	overviews       singleflight.Group
	overviewWaiting atomic.Int64
}

// New returns a Reader of cfg.
func New(cfg Config) *Reader {
	r := &Reader{
		store:    cfg.Store,
		sources:  cfg.Sources,
		known:    cfg.KnownSources,
		margin:   cfg.RenewMarginRatio,
		purposes: cfg.Purposes,
		logger:   cfg.Logger,
		verdicts: newVerdictCache(),
		costs:    newCostCache(),
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	return r
}

// Store is the store r reads, for the parts of the query layer that take
// one (audit/review, audit/verdict, audit/history).
func (r *Reader) Store() audit.Reads { return r.store }

// Purposes are the locks' purposes r judges verdicts with.
func (r *Reader) Purposes() verdict.Purposes { return r.purposes }

// RenewMarginRatio is the share of a lease left under which a held lock is
// near its expiry; zero when no lock is.
func (r *Reader) RenewMarginRatio() float64 { return r.margin }

// NearExpiry reports whether held lock l has less than margin (a share of
// its lease, as Config.RenewMarginRatio) of its lease left at now, or is
// past its expiry without a release. No lock is with a zero margin.
func NearExpiry(l audit.Lock, now time.Time, margin float64) bool {
	if margin == 0 || l.State != audit.StateHeld || l.ExpiresAt.IsZero() || l.LeaseDuration <= 0 {
		return false
	}
	return float64(l.ExpiresAt.Sub(now)) < margin*float64(l.LeaseDuration)
}

// expiringFilter selects the held locks (class lock) with less than the
// renew margin of their lease left at now, least left first.
func (r *Reader) expiringFilter(now time.Time, limit int) audit.LockFilter {
	return audit.LockFilter{Class: audit.ClassLock, ExpiringBy: r.margin, ExpiringAt: now, Sort: audit.SortExpiry, Limit: limit}
}

// SourceNames lists the configured sources' names in order.
func (r *Reader) SourceNames() []string {
	var names []string
	if r.sources != nil {
		for _, src := range r.sources() {
			names = append(names, src.Name)
		}
	} else {
		names = slices.Collect(maps.Keys(r.known))
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Sources returns the sources with their collectors' health and each one's
// newest event from the store, ordered by name.
func (r *Reader) Sources(ctx context.Context) ([]audit.Source, error) {
	var sources []audit.Source
	if r.sources != nil {
		sources = slices.Clone(r.sources())
	} else {
		for name, kind := range r.known {
			sources = append(sources, audit.Source{Name: name, Kind: kind, State: audit.SourceDown})
		}
	}
	last, err := r.store.LastEventAt(ctx)
	switch {
	case audit.ErrorCode(err) == audit.EUNAVAILABLE && ctx.Err() == nil:
		// A database that is down is when source health matters most:
		// answer with what the collectors know.
		r.logger.Warn("source health without the stored last events", "err", err)
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

// newest keeps the last n items of a list in time order (the store returns
// the newest when asked for one more than n) and says whether it dropped
// any.
func newest[T any](items []T, n int) ([]T, bool) {
	if len(items) <= n {
		return items, false
	}
	return items[len(items)-n:], true
}

// olderPage keeps the newest limit of items, read as limit+1, and says
// whether older ones exist. A store reads at most audit.MaxListLimit, so at
// that limit the one more cannot be read: a full page is taken to have
// older ones, and the next page says whether it had.
func olderPage[T any](items []T, limit int) ([]T, bool) {
	items, older := newest(items, limit)
	return items, older || (limit >= audit.MaxListLimit && len(items) == limit)
}

// orDefault is limit, or def when limit is not positive.
func orDefault(limit, def int) int {
	if limit <= 0 {
		return def
	}
	return limit
}
