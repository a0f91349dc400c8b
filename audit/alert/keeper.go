package alert

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// evaluateEvery is how often the live alerts are evaluated: as often as the
// tracker's clock expires leases, so that a short lease (etcd's 2 s minimum,
// whose last quarter lasts half a second) is seen near expiry.
const evaluateEvery = 250 * time.Millisecond

// maxResolved bounds the recently resolved alerts kept for the alerts page.
const maxResolved = 100

// Keeper keeps leasewatch's live alerts. It follows the tracker, not the
// database: it looks locks up in the tracker (audit.Recorder.Peek) rather
// than keeping a copy of each, and takes every commit's changed locks and
// renewals to schedule them (Committed: a recorder subscriber), so a renewal
// clears a near-expiry alert at once although the rows get it only at the
// next sync. Every evaluateEvery it evaluates the locks the schedule has
// due, the findings committed since and the collectors' health. It hands
// notify (an Alertmanager sender), if any, the alerts that started or
// resolved, and every firing alert again each resendEvery.
//
// With replication (OwnSourcesOnly) it evaluates only the sources this
// replica owns, each as it comes (Gain) and goes (Lose): see owned.
type Keeper struct {
	eval        *Evaluator
	sources     func() []audit.Source
	notify      func([]Alert)
	resendEvery time.Duration
	sent        map[string]string // the firing alerts notify has had: fingerprint to source
	longestHold time.Duration     // the longest LostHold or FencingHold of any rule
	lastResend  time.Time
	log         *slog.Logger

	mu       sync.Mutex
	peek     Peek        // nil until Follow
	store    audit.Store // nil until Follow
	owned    map[string]*owned
	lost     []string             // sources given up since the last evaluation
	live     map[string]time.Time // Input.Live
	watch    *WatchList
	findings []audit.Finding // committed since the last evaluation
	buf      []audit.Lock    // the locks of an evaluation, reused
	firing   []Alert
	resolved []Alert // newest first
}

// owned is how far a Keeper has taken up a source this replica owns. On a
// grant, the alerts the previous owner had firing from the source's
// findings (LeaseLost, FencingViolation, Leaderless, LeadershipFlapping) are
// read back from the store at the next evaluation (resumed); the source's
// collector-health alert is evaluated at once; its locks only once its
// collector is up (live), since until then the tracker's picture of them is
// older than the store's.
// Without replication owned is nil and every source is evaluated.
type owned struct {
	resumed bool
	live    bool
}

// Peek calls fn with a look-up of the locks as the tracker has them:
// audit.Recorder.Peek.
type Peek func(fn func(lock func(audit.LockKey) (audit.Lock, bool)))

// KeeperConfig is what a Keeper needs beside its rules.
type KeeperConfig struct {
	// Sources returns the collectors' states, for their health alerts;
	// nil: no collectors.
	Sources func() []audit.Source
	// ByClock names the configured sources whose backends never report an
	// expiry themselves (audit.Input.ExpireByClock): their leases are judged
	// only as far as their collectors have vouched for being live
	// (audit.Input.Live), and not at all before they first do (the stored
	// rows are as old as the last run).
	ByClock []string
	// Notify, if not nil, is handed the alerts that started or resolved at
	// each evaluation, and every firing alert again each ResendEvery.
	Notify      func([]Alert)
	ResendEvery time.Duration
}

// NewKeeper returns a Keeper of cfg's alerts that follows no tracker yet:
// subscribe it to the recorder's commits (audit.WithSubscribers), then call
// Follow once the recorder has started.
func NewKeeper(cfg Config, kc KeeperConfig) *Keeper {
	sources := kc.Sources
	if sources == nil {
		sources = func() []audit.Source { return nil }
	}
	k := &Keeper{eval: New(cfg), sources: sources, notify: kc.Notify, resendEvery: kc.ResendEvery,
		live: make(map[string]time.Time), sent: make(map[string]string), watch: NewWatchList(cfg),
		log: slog.New(slog.DiscardHandler)}
	for _, th := range append([]Thresholds{cfg.For("", "")}, rulesThresholds(cfg.Rules)...) {
		k.longestHold = max(k.longestHold, th.LostHold, th.FencingHold, FlappingHold)
	}
	for _, name := range kc.ByClock {
		k.live[name] = time.Time{}
	}
	return k
}

func rulesThresholds(rules []Rule) []Thresholds {
	out := make([]Thresholds, len(rules))
	for i, r := range rules {
		out[i] = r.Thresholds
	}
	return out
}

// OwnSourcesOnly makes k evaluate only the sources Gain hands it, until
// Lose takes them back: with replication, each source's alerts are sent by
// its owner alone. log gets the errors of taking a source up. Call it
// before Follow.
func (k *Keeper) OwnSourcesOnly(log *slog.Logger) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.owned = make(map[string]*owned)
	k.log = log
}

// Gain starts evaluating source, which this replica has just been granted
// and fenced: nothing of the previous owner's lands in the store after this.
func (k *Keeper) Gain(source string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.owned != nil && k.owned[source] == nil {
		k.owned[source] = &owned{}
	}
}

// Lose stops evaluating source, whose ownership has ended here, and forgets
// its alerts without sending them resolved: they have not ended, and the
// source's new owner goes on sending them (the same labels, so the same
// alert in Alertmanager). Call it before the recorder gives the source up,
// so that no evaluation sees its locks gone and resolves their alerts.
func (k *Keeper) Lose(source string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.owned == nil {
		return
	}
	delete(k.owned, source)
	k.lost = append(k.lost, source)
	if _, ok := k.live[source]; ok {
		k.live[source] = time.Time{} // judged again only once its collector vouches, on a next grant
	}
	k.firing = slices.DeleteFunc(k.firing, func(al Alert) bool { return al.Labels[LabelSource] == source })
	k.findings = slices.DeleteFunc(k.findings, func(f audit.Finding) bool { return f.Lock.Source == source })
}

// evaluates reports whether source's locks are evaluated here; k.mu must be
// held.
func (k *Keeper) evaluates(source string) bool {
	if k.owned == nil {
		return true
	}
	o := k.owned[source]
	return o != nil && o.live
}

// Follow makes k look locks up with peek and schedules every lock in
// store (the recorder's Fresh view, whose rows carry renewals the last sync
// has not written). Locks that commits have changed meanwhile are as new in
// store as the commits said.
func (k *Keeper) Follow(ctx context.Context, peek Peek, store audit.Reads) error {
	k.mu.Lock()
	k.peek, k.store = peek, store
	k.mu.Unlock()
	return k.schedule(ctx, "")
}

// schedule puts the locks of source in the store (every source's, if
// empty) on the watch list.
func (k *Keeper) schedule(ctx context.Context, source string) error {
	const page = audit.MaxLockLimit                    // the most one read returns
	f := audit.LockFilter{Source: source, Limit: page} // every class and state
	store := k.store
	for {
		locks, err := store.Locks(ctx, f)
		if err != nil {
			return err
		}
		k.mu.Lock()
		for _, l := range locks {
			k.watch.Update(l)
		}
		k.mu.Unlock()
		if len(locks) < page {
			return nil
		}
		f.After = locks[len(locks)-1].ID
	}
}

var _ audit.CommitSubscriber = (*Keeper)(nil)

// Committed schedules the locks commit c changed or renewed, and collects
// the new findings: a Keeper is a recorder subscriber.
func (k *Keeper) Committed(c audit.Commit) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, st := range c.Batch.Locks {
		k.watch.Update(st.Lock)
	}
	if len(c.Renewals) > 0 && k.peek != nil {
		k.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
			for _, rn := range c.Renewals {
				if l, ok := lock(rn.Lock); ok {
					k.watch.Update(l)
				}
			}
		})
	}
	k.findings = append(k.findings, c.Batch.Findings...)
	for _, in := range c.Inputs {
		if in.Live && in.At.After(k.live[in.Source]) {
			k.live[in.Source] = in.At
		}
	}
}

// Run evaluates every evaluateEvery until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(evaluateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			k.evaluate(now)
		}
	}
}

// evaluate runs the evaluator once at now and keeps, and hands on, what it
// says.
func (k *Keeper) evaluate(now time.Time) {
	sources := k.sources()
	k.mu.Lock()
	lost, resume, live := k.advance(sources)
	k.mu.Unlock()
	if len(lost)+len(resume)+len(live) > 0 {
		k.takeUp(now, lost, resume, live) // reads the store: unlocked
	}
	k.mu.Lock()
	k.buf = k.relevant(now, k.buf[:0])
	in := Input{Findings: k.findings, Sources: k.ownedOnly(sources), Locks: k.buf, Live: maps.Clone(k.live)}
	k.findings = nil
	k.mu.Unlock()
	// The evaluator and buf are this goroutine's alone, so the evaluation
	// runs unlocked: a commit (Committed) takes k.mu, and
	// a commit must not wait for thousands of firing alerts to be ordered.
	out := k.eval.Evaluate(now, in)
	k.mu.Lock()
	out = k.stillOwned(out)
	firing := make([]Alert, 0, len(out))
	var resolved []Alert
	for _, al := range out {
		if al.Firing() {
			firing = append(firing, al)
		} else {
			resolved = append(resolved, al)
		}
	}
	k.firing = firing
	slices.Reverse(resolved)
	k.resolved = append(resolved, k.resolved...)
	if len(k.resolved) > maxResolved {
		k.resolved = k.resolved[:maxResolved]
	}
	k.mu.Unlock()
	if k.notify != nil {
		if send := k.toSend(now, out); len(send) > 0 {
			k.notify(send)
		}
	}
}

// advance returns, with replication, the sources given up since the last
// evaluation, those granted whose alerts are still to be read back, and
// those whose collectors have come up since their grant, which it marks
// live. The findings of sources not yet resumed are left to the read back,
// which finds them in the store. k.mu must be held.
func (k *Keeper) advance(sources []audit.Source) (lost, resume, live []string) {
	if k.owned == nil {
		return nil, nil, nil
	}
	lost, k.lost = k.lost, nil
	for name, o := range k.owned {
		if !o.resumed {
			resume = append(resume, name)
		}
	}
	for _, src := range sources {
		if o := k.owned[src.Name]; o != nil && !o.live && src.State == audit.SourceUp {
			o.live = true
			live = append(live, src.Name)
		}
	}
	if len(resume) > 0 {
		k.findings = slices.DeleteFunc(k.findings, func(f audit.Finding) bool {
			o := k.owned[f.Lock.Source]
			return o == nil || !o.resumed
		})
	}
	return lost, resume, live
}

// ownedOnly returns the states of the sources evaluated here. k.mu must be
// held.
func (k *Keeper) ownedOnly(sources []audit.Source) []audit.Source {
	if k.owned == nil {
		return sources
	}
	out := make([]audit.Source, 0, len(sources))
	for _, src := range sources {
		if k.owned[src.Name] != nil {
			out = append(out, src)
		}
	}
	return out
}

// readBackTimeout bounds the store reads that take a source up.
const readBackTimeout = 10 * time.Second

// takeUp forgets the alerts of the sources lost, resumes from the store the
// alerts of the sources granted, and schedules the locks of those whose
// collectors came up; evaluation goroutine only. A read that fails is tried
// again at the next evaluation.
func (k *Keeper) takeUp(now time.Time, lost, resume, live []string) {
	for _, source := range lost {
		k.eval.Forget(source)
		maps.DeleteFunc(k.sent, func(_, s string) bool { return s == source }) // sent at once if it comes back
	}
	ctx, cancel := context.WithTimeout(context.Background(), readBackTimeout)
	defer cancel()
	for _, source := range resume {
		findings, err := k.readBack(ctx, now, source)
		if err != nil {
			k.log.Error("read a granted source's findings back for its alerts; will retry", "source", source, "err", err)
			continue
		}
		var locks []audit.Lock
		k.mu.Lock()
		if o := k.owned[source]; o != nil {
			o.resumed = true
			k.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
				for _, f := range findings {
					if l, ok := lock(f.Lock); ok {
						locks = append(locks, l)
					}
				}
			})
		} else {
			findings = nil // lost again meanwhile
		}
		k.mu.Unlock()
		k.eval.Resume(now, findings, locks)
	}
	for _, source := range live {
		if err := k.schedule(ctx, source); err != nil {
			k.log.Error("read a granted source's locks for its alerts; will retry", "source", source, "err", err)
			k.mu.Lock()
			if o := k.owned[source]; o != nil {
				o.live = false
			}
			k.mu.Unlock()
		}
	}
}

// readBack returns the findings of source that can still hold an alert at
// now: those within the longest LostHold, FencingHold or FlappingHold of any
// rule, and leaderless findings of any age, whose alert fires until the
// lock is held again.
func (k *Keeper) readBack(ctx context.Context, now time.Time, source string) ([]audit.Finding, error) {
	from := now.Add(-k.longestHold)
	var out []audit.Finding
	for _, f := range []audit.FindingFilter{
		{Source: source, Kind: audit.FindingLeaseExpired, TimeFilter: audit.TimeFilter{From: from}},
		{Source: source, Severity: audit.SeverityCritical, TimeFilter: audit.TimeFilter{From: from}},
		{Source: source, Kind: audit.FindingFlapping, TimeFilter: audit.TimeFilter{From: from}},
		{Source: source, Kind: audit.FindingLeaderless},
	} {
		f.Limit = audit.MaxListLimit
		for page := 0; page < maxReadBackPages; page++ {
			fs, err := k.store.Findings(ctx, f)
			if err != nil {
				return nil, err
			}
			out = append(out, fs...)
			if len(fs) < f.Limit {
				break
			}
			f.Before = audit.EventCursor{At: fs[0].At, ID: fs[0].ID} // newest first: go on to the older
		}
	}
	return out, nil
}

// maxReadBackPages bounds the findings read back per kind of alert when a
// source is granted: the newest MaxListLimit × this. A flood of fencing
// findings needs only its newest to keep its alerts firing.
const maxReadBackPages = 10

// stillOwned drops from an evaluation's result the alerts of sources lost
// while it ran, and the resolved alerts of locks the tracker no longer has:
// a fence refusal gives the source up in the recorder before it tells lose,
// and an evaluation in between must not resolve the source's alerts. k.mu
// must be held.
func (k *Keeper) stillOwned(out []Alert) []Alert {
	if k.owned == nil || k.peek == nil {
		return out
	}
	var gone map[audit.LockKey]bool
	k.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
		for _, al := range out {
			key := audit.LockKey{Source: al.Labels[LabelSource], Name: al.Labels[LabelLock]}
			if al.Firing() || key.Name == "" {
				continue
			}
			if _, ok := lock(key); !ok {
				if gone == nil {
					gone = make(map[audit.LockKey]bool)
				}
				gone[key] = true
			}
		}
	})
	return slices.DeleteFunc(out, func(al Alert) bool {
		source := al.Labels[LabelSource]
		return k.owned[source] == nil || gone[audit.LockKey{Source: source, Name: al.Labels[LabelLock]}]
	})
}

// relevant appends to buf the locks an evaluation at now needs (see
// Input.Locks), as the tracker has them: those the watch list has
// due, and those the new findings and the firing alerts that resolve on a
// grant (LeaseLost, Leaderless) name.
// k.mu must be held.
func (k *Keeper) relevant(now time.Time, buf []audit.Lock) []audit.Lock {
	if k.peek == nil {
		return buf
	}
	k.peek(func(tracked func(audit.LockKey) (audit.Lock, bool)) {
		// The locks of sources not evaluated here are as if gone: the
		// watch list drops them, and schedule puts them back when their
		// source is taken up.
		lock := func(key audit.LockKey) (audit.Lock, bool) {
			if !k.evaluates(key.Source) {
				return audit.Lock{}, false
			}
			return tracked(key)
		}
		seen := make(map[audit.LockKey]bool)
		add := func(key audit.LockKey) {
			if l, ok := lock(key); ok && !seen[key] {
				seen[key] = true
				buf = append(buf, l)
			}
		}
		for _, key := range k.watch.Due(now, k.live, lock) {
			add(key)
		}
		for _, f := range k.findings {
			add(f.Lock)
		}
		for _, al := range k.firing {
			if ResolvesOnGrant(al.Name()) {
				add(audit.LockKey{Source: al.Labels[LabelSource], Name: al.Labels[LabelLock]})
			}
		}
	})
	return buf
}

// toSend returns what of an evaluation's result notify needs: every alert
// when a re-send is due, else the alerts that began firing and those that
// resolved.
func (k *Keeper) toSend(now time.Time, out []Alert) []Alert {
	if now.Sub(k.lastResend) >= k.resendEvery {
		k.lastResend = now
		clear(k.sent)
		for _, al := range out {
			if al.Firing() {
				k.sent[al.Fingerprint()] = al.Labels[LabelSource]
			}
		}
		return out
	}
	var send []Alert
	for _, al := range out {
		fp := al.Fingerprint()
		switch {
		case !al.Firing():
			delete(k.sent, fp)
			send = append(send, al)
		case k.sent[fp] == "":
			k.sent[fp] = al.Labels[LabelSource]
			send = append(send, al)
		}
	}
	return send
}

// Alerts returns the firing alerts and the recently resolved ones, newest
// first, for the alerts page.
func (k *Keeper) Alerts() (firing, resolved []Alert) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.firing), slices.Clone(k.resolved)
}
