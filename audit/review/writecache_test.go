package review_test

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
)

// countingStore counts the reads of write reports.
type countingStore struct {
	audit.Store
	writeReads *atomic.Int64
}

func (s countingStore) WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error) {
	s.writeReads.Add(1)
	return s.Store.WriteEvents(ctx, lockID, outcome, f)
}

// observer returns a function that records, through rec, an observation
// of the orders lock with a 20 s lease at t0 plus when.
func observer(t *testing.T, rec *audit.Recorder) func(kind audit.EventKind, when, holder string, token int64) {
	return func(kind audit.EventKind, when, holder string, token int64) {
		t.Helper()
		in := audit.Input{Source: source, Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: ordersKey, Kind: kind, At: at(when), Holder: holder, Token: audit.Int64(token), LeaseDuration: 20 * time.Second,
		}}}
		if err := rec.Record(context.Background(), in); err != nil {
			t.Fatalf("observe %s %s: %v", kind, when, err)
		}
	}
}

// busyHandovers records three handovers of the orders lock in the first
// three minutes, and a write every 40 ms from 5 s on, over twenty ticks:
// the holder's own, and every seventh a late one with the previous token,
// which the ledger rejected (stale), every eleventh one the cache accepted
// (unfenced).
func busyHandovers(t *testing.T) (audit.Store, *audit.Recorder) {
	t.Helper()
	ctx := context.Background()
	st, rec := recorder(t)
	observe := observer(t, rec)
	observe(audit.EventGrant, "1s", "worker-1", 41)
	observe(audit.EventExpire, "40s", "worker-1", 41)
	observe(audit.EventGrant, "41s", "worker-2", 42)
	observe(audit.EventRelease, "1m30s", "worker-2", 42)
	observe(audit.EventGrant, "1m31s", "worker-3", 43)
	observe(audit.EventExpire, "2m20s", "worker-3", 43)
	observe(audit.EventGrant, "2m22s", "worker-1", 44)
	holders := map[int64]string{41: "worker-1", 42: "worker-2", 43: "worker-3", 44: "worker-1"}
	tokenAt := func(d time.Duration) int64 {
		switch {
		case d < 41*time.Second:
			return 41
		case d < 91*time.Second:
			return 42
		case d < 142*time.Second:
			return 43
		}
		return 44
	}
	var batch []audit.WriteReport
	for i := range 5000 {
		d := 5*time.Second + time.Duration(i)*40*time.Millisecond
		token := tokenAt(d)
		w := audit.WriteReport{Source: source, Lock: lock, Resource: "ledger", Token: audit.Int64(token),
			Holder: holders[token], Outcome: audit.WriteAccepted, At: t0.Add(d)}
		if token > 41 {
			switch {
			case i%7 == 0:
				w.Token, w.Holder, w.Outcome = audit.Int64(token-1), holders[token-1], audit.WriteRejected
			case i%11 == 0:
				w.Token, w.Holder, w.Resource = audit.Int64(token-1), holders[token-1], "cache"
			}
		}
		batch = append(batch, w)
		if len(batch) == 500 {
			if err := rec.ReportWrites(ctx, batch); err != nil {
				t.Fatalf("report writes: %v", err)
			}
			batch = nil
		}
	}
	return st, rec
}

// A report read through a cache is the report read without one: when the
// cache is empty, when it holds every tick (then it reads no write again),
// after writes are stored into a tick it holds and into new ones (then it
// reads those ticks only), and in a cache too small for the ticks, which
// keeps no more writes than it may.
func TestWriteCacheGivesWhatTheStoreGives(t *testing.T) {
	ctx := context.Background()
	st, rec := busyHandovers(t)
	defer rec.Close()
	var reads atomic.Int64
	counted := countingStore{Store: st, writeReads: &reads}
	q := review.Query{Window: window(), Locks: []string{ordersKey.String()}, Options: review.Options{MaxWrites: 12}}
	cached := q
	cached.Cache = review.NewWriteCache(1 << 16)
	same := func(when string, c *review.WriteCache) int64 {
		t.Helper()
		want := load(t, st, q)
		if want.Handovers() != 3 {
			t.Fatalf("%s: %d handovers, want 3", when, want.Handovers())
		}
		before := reads.Load()
		withCache := q
		withCache.Cache = c
		got := load(t, counted, withCache)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: through the cache\n%+v\nwant\n%+v", when, got, want)
		}
		return reads.Load() - before
	}

	first := same("empty cache", cached.Cache)
	if first == 0 || cached.Cache.Len() == 0 {
		t.Fatalf("empty cache: %d reads of writes, %d writes kept; want some of both", first, cached.Cache.Len())
	}
	if n := same("full cache", cached.Cache); n != 0 {
		t.Errorf("full cache: %d reads of writes, want none", n)
	}

	// A late report into a tick the cache holds, and new writes in a tick
	// of their own.
	late := []audit.WriteReport{
		{Source: source, Lock: lock, Resource: "cache", Token: audit.Int64(41), Holder: "worker-1", Outcome: audit.WriteAccepted, At: at("52.5s")},
		{Source: source, Lock: lock, Resource: "ledger", Token: audit.Int64(44), Holder: "worker-1", Outcome: audit.WriteAccepted, At: at("3m45s")},
		{Source: source, Lock: lock, Resource: "ledger", Token: audit.Int64(43), Holder: "worker-3", Outcome: audit.WriteRejected, At: at("3m46s")},
	}
	if err := rec.ReportWrites(ctx, late); err != nil {
		t.Fatal(err)
	}
	if n := same("after more writes", cached.Cache); n == 0 || n > 3 {
		t.Errorf("after more writes: %d reads of writes, want those of the 3 ticks written to", n)
	}

	// A tick holds about 215 accepted writes, more than a quarter of the
	// cache, which it so does not keep, and 35 rejected ones.
	small := review.NewWriteCache(600)
	same("small cache", small)
	same("small cache again", small)
	if n := small.Len(); n == 0 || n > 600 {
		t.Errorf("small cache holds %d writes, want some and at most 600", n)
	}
}
