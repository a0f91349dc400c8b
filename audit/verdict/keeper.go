package verdict

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Keeper keeps each lock's verdict over the last KeptWindow in the store
// (audit.LockVerdict), so that the locks list can show and filter by it and
// the overview and metrics count it without judging every lock on every
// request. It judges again, every Every, the locks that Touch names (those
// a commit changed: a grant, an end, a write, a finding), and, every
// Sweep, every lock of class lock whose source Owns, since the window
// slides even over a lock nothing happens to. A verdict read from the store
// is therefore at most Every behind the lock's events (a little more while a
// sweep's page is judged), and at most Sweep and a sweep's time behind the
// window. A sweep yields to the pages served meanwhile (sweep). Heartbeats guard nothing, and are not judged.
type Keeper struct {
	// Store is read for the verdicts' facts, which need no renewals: the
	// rows as the journal last synced them serve.
	Store KeeperStore
	// Put keeps verdicts: audit.Database's PutVerdicts.
	Put      func(ctx context.Context, verdicts []audit.LockVerdict) error
	Purposes Purposes
	Now      func() time.Time
	Every    time.Duration // default DefaultKeepEvery
	Sweep    time.Duration // default DefaultSweep
	// Owns says which sources this process records, and so judges; nil:
	// every source.
	Owns func(source string) bool
	Log  *slog.Logger

	mu    sync.Mutex
	dirty map[audit.LockKey]bool
}

// Keeper defaults.
const (
	KeptWindow       = 24 * time.Hour
	DefaultKeepEvery = 10 * time.Second
	DefaultSweep     = 10 * time.Minute
	// sweepPage is how many locks a sweep lists at a time.
	sweepPage = 500
)

// Touch marks locks to be judged again at the next round.
func (k *Keeper) Touch(keys ...audit.LockKey) {
	if len(keys) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dirty == nil {
		k.dirty = make(map[audit.LockKey]bool)
	}
	for _, key := range keys {
		k.dirty[key] = true
	}
}

// Committed is a recorder subscriber: it touches the locks c changed
// (Touched).
func (k *Keeper) Committed(c audit.Commit) {
	if c.Batch != nil {
		k.Touch(Touched(c.Batch)...)
	}
}

// Touched returns the locks a commit changed in ways that can change their
// verdict: every lock written in full (grants and ends; renewals alone are
// not), and every lock an event or a finding names that is not a renewal.
// Heartbeats are not judged, so none that the batch writes is touched: a
// cluster's snapshot or mass expiry would otherwise have the next round
// read every node's Lease back only to skip it.
func Touched(b *audit.Batch) []audit.LockKey {
	var keys []audit.LockKey
	var heartbeats map[audit.LockKey]bool
	for i := range b.Locks {
		key := b.Locks[i].Lock.Key()
		if b.Locks[i].Lock.Class != audit.ClassHeartbeat {
			keys = append(keys, key)
			continue
		}
		if heartbeats == nil {
			heartbeats = make(map[audit.LockKey]bool)
		}
		heartbeats[key] = true
	}
	for _, e := range b.Events {
		if e.Kind != audit.EventRenew && !heartbeats[e.Lock] {
			keys = append(keys, e.Lock)
		}
	}
	for _, f := range b.Findings {
		if !heartbeats[f.Lock] {
			keys = append(keys, f.Lock)
		}
	}
	return keys
}

// Run judges every lock once, then keeps the verdicts until ctx ends.
func (k *Keeper) Run(ctx context.Context) error {
	every, sweep := k.Every, k.Sweep
	if every <= 0 {
		every = DefaultKeepEvery
	}
	if sweep <= 0 {
		sweep = DefaultSweep
	}
	lastSweep := time.Time{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var err error
		if now := k.Now(); now.Sub(lastSweep) >= sweep {
			if err = k.sweep(ctx, every); err == nil {
				lastSweep = now
			}
		} else {
			err = k.Round(ctx)
		}
		if err != nil && ctx.Err() == nil {
			k.Log.Error("keep lock verdicts; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Round judges the locks touched since the last round, sweepPage at a
// time, so that a round after a large commit holds a page of locks, not
// all of them. Those it could not judge are touched again.
func (k *Keeper) Round(ctx context.Context) error {
	k.mu.Lock()
	dirty := k.dirty
	k.dirty = nil
	k.mu.Unlock()
	locks := make([]audit.Lock, 0, min(len(dirty), sweepPage))
	for key := range dirty {
		l, err := k.Store.LockByKey(ctx, key)
		if audit.ErrorCode(err) == audit.ENOTFOUND {
			continue // a write report for a lock not stored yet: touched again when it is
		}
		if err == nil {
			locks = append(locks, l)
			if len(locks) < sweepPage {
				continue
			}
			err = k.judge(ctx, locks)
			locks = locks[:0]
		}
		if err != nil {
			k.retouch(dirty)
			return err
		}
	}
	if err := k.judge(ctx, locks); err != nil {
		k.retouch(dirty)
		return err
	}
	return nil
}

func (k *Keeper) retouch(keys map[audit.LockKey]bool) {
	for key := range keys {
		k.Touch(key)
	}
}

// SweepOnce judges every lock of class lock of the sources it owns, as
// fast as the store answers.
func (k *Keeper) SweepOnce(ctx context.Context) error { return k.sweep(ctx, 0) }

// sweep judges every lock of class lock of the sources it owns, a page at a
// time. With a round interval every (0: unpaced), it is background work
// that yields: after each page it rests for as long as the page took, so
// that a sweep takes at most half of the store's time while pages are
// served, and it runs a Round once every has passed, so that a lock changed
// during a long sweep is still judged within about every.
func (k *Keeper) sweep(ctx context.Context, every time.Duration) error {
	f := audit.LockFilter{Class: audit.ClassLock, Limit: sweepPage}
	lastRound := time.Now()
	for {
		start := time.Now()
		page, err := k.Store.Locks(ctx, f)
		if err != nil {
			return err
		}
		if err := k.judge(ctx, page); err != nil {
			return err
		}
		if len(page) < sweepPage {
			return nil
		}
		f.After = page[len(page)-1].ID
		if every <= 0 {
			continue
		}
		if err := audit.Pause(ctx, time.Since(start)); err != nil {
			return err
		}
		if time.Since(lastRound) >= every {
			if err := k.Round(ctx); err != nil && ctx.Err() == nil {
				k.Log.Error("keep lock verdicts; will retry", "err", err) // the round's locks are touched again
			}
			lastRound = time.Now()
		}
	}
}

// judge judges locks over the window that ends now and keeps the verdicts.
func (k *Keeper) judge(ctx context.Context, locks []audit.Lock) error {
	now := k.Now()
	w := Window{From: now.Add(-KeptWindow), To: now}
	var out []audit.LockVerdict
	var errs []error
	for _, l := range locks {
		if l.Class == audit.ClassHeartbeat || (k.Owns != nil && !k.Owns(l.Source)) {
			continue
		}
		v, err := Load(ctx, k.Store, l, w, k.Purposes.For(l.Source, l.Name), now)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		out = append(out, audit.LockVerdict{LockID: l.ID, Verdict: string(v.Kind), JudgedAt: now})
	}
	if len(out) > 0 {
		if err := k.Put(ctx, out); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}
