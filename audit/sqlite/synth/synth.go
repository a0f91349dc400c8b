// Package synth writes a synthetic, deterministic audit log into a store
// (any audit.Journal: SQLite, PostgreSQL): tens of thousands of locks over weeks, with tenures, renewals,
// expiries, fenced writes and every common finding, shaped like what the
// collectors and the tracker record. The dashboard's benchmarks run on it.
//
// Generation goes through the store's own Apply in large batches, so the
// database is exactly what the store would have written, and the same spec
// gives every store the same data.
package synth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// Version changes whenever Generate writes something different for the same
// Spec, so a cached database from an older generator is never reused.
const Version = 3

// Spec sizes a synthetic audit log.
type Spec struct {
	Locks int       // number of locks, at least 10
	Days  int       // length of the history, ending at End
	End   time.Time // the newest instant; "now" for the data
	// Events is the rough total of events to write; busy locks take
	// BusyShare of it, the other locks share the rest.
	Events    int
	BusyLocks int     // locks renewing every few seconds for the whole history
	BusyShare float64 // fraction of Events the busy locks write
	Seed      uint64
	// WriteLocks are etcd locks, beyond Locks, that change hands every few
	// seconds in the history's last hour while WriteResources protected
	// resources report every write to them, as the ingest load makes them:
	// thousands of write reports and hundreds of stale_write findings per
	// lock and hour. Zero leaves the spec's database as it always was.
	WriteLocks     int `json:",omitempty"`
	WriteResources int `json:",omitempty"`
}

// Default is the benchmark's database: 50,000 locks, about 10 million
// events over 30 days, one lock with more than a million renewals. (Events
// asks for more than that: tenures rarely fill their whole slot.)
func Default() Spec {
	return Spec{
		Locks: 50_000, Days: 30, End: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		Events: 12_200_000, BusyLocks: 5, BusyShare: 0.34, Seed: 1,
	}
}

// Writes is the database of the write-heavy page benchmarks: a modest audit
// log plus 20 locks that each took about 6,500 write reports, 800 stale
// writes and a few unfenced writes in the last hour, like those the ingest
// load (200 resources, 20 etcd locks) leaves behind.
func Writes() Spec {
	return Spec{
		Locks: 2_000, Days: 7, End: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		Events: 600_000, BusyLocks: 2, BusyShare: 0.3, Seed: 1,
		WriteLocks: 20, WriteResources: 10,
	}
}

// Small is a quick database with the same shape, for tests.
func Small() Spec {
	return Spec{
		Locks: 120, Days: 2, End: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		Events: 20_000, BusyLocks: 1, BusyShare: 0.3, Seed: 1,
	}
}

// Summary says what Generate wrote and where to look.
type Summary struct {
	Spec     Spec
	Locks    int
	Tenures  int
	Events   int
	Findings int
	// Busiest is the lock with the most renewals; BusiestRenewals counts them.
	Busiest         audit.LockKey
	BusiestRenewals int
	Sources         []string
	// Written are the WriteLocks; WrittenWrites counts the first one's write
	// reports and WrittenStale its stale_write findings.
	Written       []audit.LockKey `json:",omitempty"`
	WrittenWrites int             `json:",omitempty"`
	WrittenStale  int             `json:",omitempty"`
}

// Sources of the synthetic data, one per backend kind.
var sources = []struct {
	name string
	kind audit.SourceKind
}{
	{"prod-etcd", audit.KindEtcd},
	{"cluster-a", audit.KindKubernetes},
	{"cache", audit.KindRedis},
}

// Blind windows per source, as offsets from the history's start in
// fractions of its length, with their length and reason.
var blinds = []struct {
	at     float64
	length time.Duration
	reason string
}{
	{0.33, 90 * time.Second, "etcd compaction"},
	{0.76, 4 * time.Minute, "disconnected"},
}

// flushEvents is how many events one Apply writes.
const flushEvents = 250_000

// Store is what Generate writes through: a store's journal, and its sealer
// of renewals into runs.
type Store interface {
	audit.Journal
	audit.Sealer
}

// Generate writes spec's audit log into store, which should be empty, and
// seals its renewals into runs as the service's retention would have by
// spec.End: every hour closed audit.SealGrace before it.
func Generate(ctx context.Context, store Store, spec Spec) (Summary, error) {
	if spec.Locks < 10 || spec.Days < 1 || spec.Events < spec.Locks || spec.BusyLocks < 0 || spec.BusyLocks >= spec.Locks ||
		spec.WriteLocks < 0 || spec.WriteLocks > 0 && spec.WriteResources < 1 {
		return Summary{}, fmt.Errorf("synth: spec %+v is too small", spec)
	}
	g := &generator{spec: spec, store: store, start: spec.End.Add(-time.Duration(spec.Days) * 24 * time.Hour)}
	g.sum.Spec = spec
	for _, s := range sources {
		g.sum.Sources = append(g.sum.Sources, s.name)
	}
	for i := range spec.Locks {
		if err := ctx.Err(); err != nil {
			return g.sum, err
		}
		g.lock(i)
		if len(g.batch.Events) >= flushEvents {
			if err := g.flush(ctx); err != nil {
				return g.sum, err
			}
		}
	}
	for i := range spec.WriteLocks {
		g.writeLock(spec.Locks + i)
		if len(g.batch.Events) >= flushEvents {
			if err := g.flush(ctx); err != nil {
				return g.sum, err
			}
		}
	}
	if err := g.flush(ctx); err != nil {
		return g.sum, err
	}
	sealed := spec.End.Add(-audit.SealGrace).Truncate(audit.RunWindow)
	return g.sum, audit.SealThrough(ctx, store, sealed, func(audit.SealResult, time.Duration) error { return ctx.Err() })
}

type generator struct {
	spec     Spec
	store    audit.Journal
	start    time.Time
	batch    audit.Batch
	revision int64 // etcd's global revision, the etcd token
	sum      Summary
}

func (g *generator) flush(ctx context.Context) error {
	if g.batch.Empty() {
		return nil
	}
	g.sum.Events += len(g.batch.Events)
	g.sum.Findings += len(g.batch.Findings)
	g.sum.Tenures += len(g.batch.Tenures)
	g.sum.Locks += len(g.batch.Locks)
	// Every batch writes its locks and tenures whole: the rows hold every
	// renewal, which sealing needs.
	g.batch.Synced = true
	if err := g.store.Apply(ctx, g.batch); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	g.batch = audit.Batch{}
	return nil
}

// lockPlan is one lock's shape.
type lockPlan struct {
	key       audit.LockKey
	kind      audit.SourceKind
	class     audit.Class
	lease     time.Duration
	every     time.Duration // renewal interval
	holders   []string
	fenced    bool
	resource  string // protected resource reporting writes; "" for none
	tenures   int
	renewals  int // total renewals to spread over the tenures
	heldAtEnd bool
}

func (g *generator) plan(i int, r *rand.Rand) lockPlan {
	src := sources[[]int{0, 0, 0, 1, 1, 1, 1, 1, 2, 2}[i%10]]
	p := lockPlan{kind: src.kind, class: audit.ClassLock, fenced: true}
	p.key.Source = src.name
	leases := []time.Duration{10 * time.Second, 15 * time.Second, 30 * time.Second, 60 * time.Second}
	p.lease = leases[r.IntN(len(leases))]
	p.every = p.lease / 3
	switch src.kind {
	case audit.KindEtcd:
		p.key.Name = fmt.Sprintf("/locks/svc-%03d/job-%05d", i%317, i)
		for range 2 + r.IntN(4) {
			p.holders = append(p.holders, fmt.Sprintf("%016x", r.Uint64()))
		}
	case audit.KindKubernetes:
		if i%10 == 3 {
			p.key.Name = fmt.Sprintf("ns-%02d/controller-%05d", i%41, i)
			for range 2 + r.IntN(4) {
				p.holders = append(p.holders, fmt.Sprintf("controller-%05d-%x-%04x", i, r.Uint32()&0xfffff, r.Uint32()&0xffff))
			}
		} else {
			p.key.Name = fmt.Sprintf("kube-node-lease/node-%05d", i)
			p.class = audit.ClassHeartbeat
			p.lease, p.every = 40*time.Second, 10*time.Second
			p.holders = []string{fmt.Sprintf("node-%05d", i)}
			p.fenced = false
		}
	case audit.KindRedis:
		p.key.Name = fmt.Sprintf("lock:tenant-%04d:job-%05d", i%997, i)
		for range 2 + r.IntN(3) {
			p.holders = append(p.holders, fmt.Sprintf("worker-%d:%08x", r.IntN(64), r.Uint32()))
		}
		p.fenced = r.IntN(10) != 0
	}
	if p.class == audit.ClassLock && i%5 == 0 {
		p.resource = fmt.Sprintf("db-%02d", i%50)
	}
	p.heldAtEnd = r.IntN(10) < 6
	if i < g.spec.BusyLocks {
		// Busy locks renew every few seconds for the whole history; the
		// first takes half of their share of events.
		share := float64(g.spec.Events) * g.spec.BusyShare / 2
		if i > 0 {
			share /= float64(max(1, g.spec.BusyLocks-1))
		}
		total := time.Duration(g.spec.Days) * 24 * time.Hour
		p.every = max(time.Second, (total / time.Duration(share+1)).Round(100*time.Millisecond))
		p.lease = 3 * p.every
		p.renewals = int(total / p.every)
		p.tenures = max(1, int(total/(15*time.Minute)))
		p.heldAtEnd = true
		return p
	}
	perLock := float64(g.spec.Events) * (1 - g.spec.BusyShare) / float64(g.spec.Locks-g.spec.BusyLocks)
	p.tenures = 1 + r.IntN(7)
	p.renewals = max(p.tenures, int(perLock*(0.5+r.Float64()))-3*p.tenures)
	return p
}

// lock writes lock i's whole history.
func (g *generator) lock(i int) {
	r := rand.New(rand.NewPCG(g.spec.Seed, uint64(i)))
	p := g.plan(i, r)
	span := g.spec.End.Sub(g.start)

	// Tenures take their share of renewals and sit in equal slots of the
	// history, at a random place inside their slot; the last one runs to
	// the end when the lock is still held.
	slot := span / time.Duration(p.tenures)
	var (
		tenures   []audit.Tenure
		lastToken int64
		events    []audit.Event
		findings  []audit.Finding
		renewals  int
		state     = audit.TrackState{}
	)
	lk := audit.Lock{Source: p.key.Source, Name: p.key.Name, Kind: p.kind, Class: p.class, State: audit.StateFree}
	emit := func(e audit.Event) {
		e.Lock = p.key
		events = append(events, e)
	}
	find := func(f audit.Finding) {
		f.Lock = p.key
		f.Severity = f.Kind.Severity()
		findings = append(findings, f)
	}
	for n := range p.tenures {
		count := p.renewals / p.tenures
		length := time.Duration(count) * p.every
		if length > slot*9/10 {
			count = int(slot * 9 / 10 / p.every)
			length = time.Duration(count) * p.every
		}
		slotStart := g.start.Add(time.Duration(n) * slot)
		granted := slotStart.Add(time.Duration(r.Int64N(int64(slot-length) + 1)))
		last := n == p.tenures-1
		held := last && p.heldAtEnd
		if held {
			granted = g.spec.End.Add(-length - time.Duration(r.Int64N(int64(p.every))))
			if granted.Before(slotStart) {
				granted = slotStart
			}
		}
		holder := p.holders[r.IntN(len(p.holders))]
		t := audit.Tenure{Lock: p.key, Seq: int64(n + 1), Holder: holder, GrantedAt: granted, LeaseDuration: p.lease,
			Position: fmt.Sprint(g.revision)}
		switch {
		case !p.fenced:
		case p.kind == audit.KindEtcd:
			g.revision += 1 + r.Int64N(5000)
			t.Token = audit.Int64(g.revision)
		default:
			lastToken++
			t.Token = audit.Int64(lastToken)
		}
		kind := audit.EventGrant
		if n == 0 && r.IntN(20) == 0 {
			kind, t.Observed = audit.EventObserved, true
		}
		emit(audit.Event{Kind: kind, At: granted, Holder: holder, Token: t.Token, TTL: p.lease, Position: t.Position})
		if n == 0 && !p.fenced && p.class == audit.ClassLock {
			find(audit.Finding{Kind: audit.FindingUnfencedLock, At: granted, Holders: []string{holder},
				Summary: fmt.Sprintf("grant to %s carries no token", holder)})
		}
		// Writes at a third and two thirds of the tenure; the first closes
		// the grant's exposure window.
		var writes []time.Time
		if p.resource != "" && t.Token != nil {
			writes = []time.Time{granted.Add(length/3 + time.Duration(r.IntN(1000))*time.Millisecond), granted.Add(2 * length / 3)}
			find(audit.Finding{Kind: audit.FindingExposure, At: granted, Until: writes[0], Resource: p.resource,
				Tokens: []int64{*t.Token}, Holders: []string{holder},
				Summary: fmt.Sprintf("%s accepted token %d's predecessor until its first write with %d (%s)", p.resource, *t.Token, *t.Token, writes[0].Sub(granted).Round(time.Millisecond))})
		}
		// As the tracker records it: the lease left at each renewal.
		margin := math.Round(1000*float64(p.lease-p.every)/float64(p.lease)) / 1000
		at := granted
		for k := range count {
			at = granted.Add(time.Duration(k+1) * p.every)
			if held && at.After(g.spec.End) {
				break
			}
			for len(writes) > 0 && !writes[0].After(at) {
				emit(audit.Event{Kind: audit.EventWriteAccepted, At: writes[0], Holder: holder, Token: t.Token, Resource: p.resource})
				writes = writes[1:]
			}
			emit(audit.Event{Kind: audit.EventRenew, At: at, Holder: holder, Token: t.Token, TTL: p.lease, Seq: t.Seq,
				Detail: map[string]any{"margin_ratio": margin}})
			t.Renewals++
			renewals++
			if r.IntN(500) == 0 {
				find(audit.Finding{Kind: audit.FindingLateRenewal, At: at, Holders: []string{holder}, Tokens: tokens(t.Token),
					Summary: fmt.Sprintf("%s renewed with %s of its %s lease left", holder, (p.lease / 5).Round(time.Millisecond), p.lease)})
			}
		}
		for _, w := range writes {
			if !w.After(at) {
				emit(audit.Event{Kind: audit.EventWriteAccepted, At: w, Holder: holder, Token: t.Token, Resource: p.resource})
			}
		}
		t.LastRenewedAt = at
		t.ExpiresAt = at.Add(p.lease)
		if held {
			if r.IntN(100) == 0 {
				// Late: most of the lease is gone, so it shows as near expiry.
				t.LastRenewedAt = g.spec.End.Add(-p.lease * 85 / 100)
				t.ExpiresAt = t.LastRenewedAt.Add(p.lease)
			}
			lk.State, lk.Holder, lk.Token = audit.StateHeld, holder, t.Token
			lk.AcquiredAt, lk.RenewedAt, lk.ExpiresAt, lk.LeaseDuration = granted, t.LastRenewedAt, t.ExpiresAt, p.lease
			if t.Observed {
				lk.AcquiredAt = time.Time{}
			}
			lk.ChangedAt = granted
			tenures = append(tenures, t)
			break
		}
		// How it ended: mostly released, sometimes expired, and for locks
		// sometimes superseded by an overlapping grant.
		switch roll := r.IntN(100); {
		case roll < 80 || p.class == audit.ClassHeartbeat && roll < 97:
			t.End, t.EndedAt = audit.EndReleased, at.Add(time.Duration(r.IntN(500))*time.Millisecond)
			emit(audit.Event{Kind: audit.EventRelease, At: t.EndedAt, Holder: holder, Token: t.Token})
			lk.State = audit.StateFree
		case roll < 97 || last:
			t.End, t.EndedAt = audit.EndExpired, t.ExpiresAt
			emit(audit.Event{Kind: audit.EventExpire, At: t.EndedAt, Holder: holder, Token: t.Token, Inferred: p.kind != audit.KindEtcd})
			find(audit.Finding{Kind: audit.FindingLeaseExpired, At: t.EndedAt, Holders: []string{holder}, Tokens: tokens(t.Token),
				Summary: fmt.Sprintf("%s stopped renewing; its lease expired %s after the last renewal", holder, p.lease)})
			lk.State = audit.StateExpired
			if p.resource != "" && t.Token != nil {
				// The zombie wakes up and writes with its old token.
				w := t.EndedAt.Add(time.Duration(1+r.IntN(20)) * time.Second)
				if r.IntN(10) == 0 {
					emit(audit.Event{Kind: audit.EventWriteAccepted, At: w, Holder: holder, Token: t.Token, Resource: p.resource})
					find(audit.Finding{Kind: audit.FindingUnfencedWrite, At: w, Resource: p.resource, Tokens: tokens(t.Token), Holders: []string{holder},
						Summary: fmt.Sprintf("%s accepted a write with token %d from a tenure that ended %s earlier", p.resource, *t.Token, w.Sub(t.EndedAt).Round(time.Millisecond))})
				} else {
					emit(audit.Event{Kind: audit.EventWriteRejected, At: w, Holder: holder, Token: t.Token, Resource: p.resource})
					find(audit.Finding{Kind: audit.FindingStaleWrite, At: w, Resource: p.resource, Tokens: tokens(t.Token), Holders: []string{holder},
						Summary: fmt.Sprintf("%s rejected token %d, %s after its tenure ended", p.resource, *t.Token, w.Sub(t.EndedAt).Round(time.Millisecond))})
				}
			}
		default:
			// Superseded: the next holder is granted before this lease ran out.
			t.End, t.EndedAt = audit.EndSuperseded, at.Add(p.lease/2)
			find(audit.Finding{Kind: audit.FindingOverlap, At: t.EndedAt, Until: t.ExpiresAt, Holders: []string{holder},
				Tokens: tokens(t.Token), Summary: fmt.Sprintf("a new holder was granted while %s's lease had %s left", holder, t.ExpiresAt.Sub(t.EndedAt))})
			lk.State = audit.StateFree
		}
		lk.Holder, lk.Token, lk.ChangedAt = "", nil, t.EndedAt
		if lk.State == audit.StateExpired {
			lk.Holder, lk.Token = holder, t.Token
		}
		tenures = append(tenures, t)
	}
	if len(tenures) > 0 && lk.ChangedAt.IsZero() {
		lk.ChangedAt = tenures[len(tenures)-1].GrantedAt
	}

	// Blind windows cover every lock of the source that existed by then.
	first := tenures[0].GrantedAt
	for _, b := range blinds {
		from := g.start.Add(time.Duration(b.at * float64(span)))
		if from.Before(first) {
			continue
		}
		to := from.Add(b.length)
		emit(audit.Event{Kind: audit.EventBlind, At: to, Detail: map[string]any{
			"from": from.Format(time.RFC3339Nano), "to": to.Format(time.RFC3339Nano), "reason": b.reason}})
		find(audit.Finding{Kind: audit.FindingBlindWindow, At: from, Until: to,
			Summary: fmt.Sprintf("the collector could not see %s for %s (%s): transitions in between are inferred", p.key.Source, b.length, b.reason)})
	}

	state.Lock = lk
	state.NextSeq = int64(len(tenures))
	state.LastGrantToken = tenures[len(tenures)-1].Token
	if n := len(tenures); n > 0 {
		state.Recent = tenures[max(0, n-2):]
	}
	g.batch.Locks = append(g.batch.Locks, state)
	g.batch.Tenures = append(g.batch.Tenures, tenures...)
	g.batch.Events = append(g.batch.Events, events...)
	g.batch.Findings = append(g.batch.Findings, findings...)
	if renewals > g.sum.BusiestRenewals {
		g.sum.Busiest, g.sum.BusiestRenewals = p.key, renewals
	}
}

func tokens(t *int64) []int64 {
	if t == nil {
		return nil
	}
	return []int64{*t}
}

// Key names spec's audit log as this generator Version writes it: the same
// key, the same data, in any store. Caches are keyed by it.
func Key(spec Spec) (string, error) {
	key, err := json.Marshal(struct {
		V int
		S Spec
	}{Version, spec})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(key)
	return "synth-" + hex.EncodeToString(sum[:6]), nil
}

// Cached returns the path of a database holding spec's audit log under dir,
// generating it first if no earlier run left one for this spec and
// generator Version. A half-written database is never reused.
func Cached(ctx context.Context, dir string, spec Spec) (string, Summary, error) {
	key, err := Key(spec)
	if err != nil {
		return "", Summary{}, err
	}
	base := filepath.Join(dir, key)
	path, done := base+".db", base+".json"
	if b, err := os.ReadFile(done); err == nil {
		var s Summary
		if err := json.Unmarshal(b, &s); err == nil {
			if _, err := os.Stat(path); err == nil {
				return path, s, nil
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", Summary{}, fmt.Errorf("synth: %w", err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", done} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", Summary{}, fmt.Errorf("synth: %w", err)
		}
	}
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		return "", Summary{}, err
	}
	s, err := Generate(ctx, store, spec)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", Summary{}, err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", Summary{}, err
	}
	if err := os.WriteFile(done, b, 0o644); err != nil {
		return "", Summary{}, fmt.Errorf("synth: %w", err)
	}
	return path, s, nil
}
