package query

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// Verdicts on the lock page are judged at most once per VerdictFresh for a
// lock and scope, however many people have the page open and however often
// its live region refreshes: a verdict reads every write report of the
// window, which on a busy lock is most of the page's cost. The keeper that
// files the locks list's verdicts judges as often (verdict.DefaultKeepEvery),
// so the page is as fresh as the list. The panel says when it was judged.
const (
	VerdictFresh      = verdict.DefaultKeepEvery
	maxCachedVerdicts = 512
)

// verdictCache keeps recent verdicts, bounded, and judges each key once at
// a time: requests for a verdict being judged wait for that judgement.
type verdictCache struct {
	mu      sync.Mutex
	entries map[verdictKey]Judged
	flight  singleflight.Group
}

// verdictKey names a verdict: a lock and the scope it was judged over.
// A window that moves with now (a preset, the last 24 hours, the whole
// history) is named by its scope alone; a fixed one by its bounds.
type verdictKey struct {
	lock     int64
	scope    string // the verdict parameter and, for the page's window, its preset
	from, to int64  // a fixed window's bounds; zero for a moving one
}

// Judged is a verdict as the lock page keeps it. Its reasons keep at most
// the first of their findings' IDs, and their Count: all the page shows of
// them, so that a kept verdict holds a few hundred bytes whatever its
// findings.
type Judged struct {
	Verdict verdict.Verdict
	At      time.Time
}

func compact(v verdict.Verdict, at time.Time) Judged {
	j := Judged{Verdict: v, At: at}
	j.Verdict.Reasons = slices.Clone(v.Reasons)
	for i, r := range j.Verdict.Reasons {
		j.Verdict.Reasons[i].Findings = slices.Clip(r.Findings[:min(1, len(r.Findings))])
	}
	return j
}

func newVerdictCache() *verdictCache {
	return &verdictCache{entries: make(map[verdictKey]Judged)}
}

// get returns the verdict of key, judged by load at most VerdictFresh
// before now (compact), and when it was judged.
func (c *verdictCache) get(ctx context.Context, key verdictKey, now time.Time, load func(context.Context) (verdict.Verdict, error)) (Judged, error) {
	if j, ok := c.fresh(key, now); ok {
		return j, nil
	}
	name := fmt.Sprintf("%d/%s/%d/%d", key.lock, key.scope, key.from, key.to)
	res, err, _ := c.flight.Do(name, func() (any, error) {
		if j, ok := c.fresh(key, now); ok {
			return j, nil
		}
		// The judgement outlives the request that started it, so that the
		// others waiting for it are not failed by one leaving.
		v, err := load(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		j := compact(v, now)
		c.put(key, j)
		return j, nil
	})
	if err != nil {
		return Judged{}, err
	}
	return res.(Judged), nil
}

func (c *verdictCache) fresh(key verdictKey, now time.Time) (Judged, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.entries[key]
	return j, ok && now.Sub(j.At) < VerdictFresh && !j.At.After(now)
}

// put keeps j, first dropping stale entries when the cache is full, and any
// entry if none is stale.
func (c *verdictCache) put(key verdictKey, j Judged) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxCachedVerdicts {
		for k, e := range c.entries {
			if j.At.Sub(e.At) >= VerdictFresh {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < maxCachedVerdicts {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = j
}

// pageVerdictKey names the verdict of lock l over w, the window the page
// judges for scope.
func pageVerdictKey(l audit.Lock, scope string, page Window, w verdict.Window) verdictKey {
	switch {
	case scope != "":
		return verdictKey{lock: l.ID, scope: scope}
	case page.Preset != "":
		return verdictKey{lock: l.ID, scope: "window " + page.Preset}
	}
	return verdictKey{lock: l.ID, from: w.From.UnixNano(), to: w.To.UnixNano()}
}
