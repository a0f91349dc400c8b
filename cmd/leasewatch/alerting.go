package main

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/collectors/backends"
)

// evaluateEvery is how often the live alerts are evaluated: as often as the
// tracker's clock expires leases, so that a short lease (etcd's 2 s minimum,
// whose last quarter lasts half a second) is seen near expiry.
const evaluateEvery = 250 * time.Millisecond

// maxResolved bounds the recently resolved alerts kept for the alerts page.
const maxResolved = 100

// alerting keeps leasewatch's live alerts. It follows the tracker, not the
// database: it looks locks up in the tracker (audit.Recorder.Peek) rather
// than keeping a copy of each, and takes every commit's changed locks and
// renewals to schedule them, so a renewal clears a near-expiry alert at once
// although the rows get it only at the next sync. Every evaluateEvery it
// evaluates the locks the schedule has due, the findings committed since and
// the collectors' health. It hands notify (an Alertmanager sender), if any,
// the alerts that started or resolved, and every firing alert again each
// resendEvery.
//
// With replication (ownSourcesOnly) it evaluates only the sources this
// replica owns, each as it comes (gain) and goes (lose): see owned.
type alerting struct {
	eval        *alert.Evaluator
	sources     func() []audit.Source
	notify      func([]alert.Alert)
	resendEvery time.Duration
	sent        map[string]string // the firing alerts notify has had: fingerprint to source
	longestHold time.Duration     // the longest LostHold or FencingHold of any rule
	lastResend  time.Time
	log         *slog.Logger

	mu       sync.Mutex
	peek     peekFunc    // nil until follow
	store    audit.Store // nil until follow
	owned    map[string]*owned
	lost     []string             // sources given up since the last evaluation
	live     map[string]time.Time // alert.Input.Live
	watch    *alert.WatchList
	findings []audit.Finding // committed since the last evaluation
	buf      []audit.Lock    // the locks of an evaluation, reused
	firing   []alert.Alert
	resolved []alert.Alert // newest first
}

// owned is how far alerting has taken up a source this replica owns. On a
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

// peekFunc calls fn with a look-up of the locks as the tracker has them:
// audit.Recorder.Peek.
type peekFunc func(fn func(lock func(audit.LockKey) (audit.Lock, bool)))

// newAlerting returns an alerting that follows no tracker yet: subscribe
// it to the recorder's commits, then call follow once the
// recorder has started. kinds are the configured sources: the leases of
// those whose collectors vouch for being live are judged only as far as they
// have, and not at all before they first do (the stored rows are as old as
// the last run).
func newAlerting(cfg alert.Config, kinds map[string]audit.SourceKind, sources func() []audit.Source, notify func([]alert.Alert), resendEvery time.Duration) *alerting {
	a := &alerting{eval: alert.New(cfg), sources: sources, notify: notify, resendEvery: resendEvery,
		live: make(map[string]time.Time), sent: make(map[string]string), watch: alert.NewWatchList(cfg),
		log: slog.New(slog.DiscardHandler)}
	for _, th := range append([]alert.Thresholds{cfg.For("", "")}, rulesThresholds(cfg.Rules)...) {
		a.longestHold = max(a.longestHold, th.LostHold, th.FencingHold, alert.FlappingHold)
	}
	for name, kind := range kinds {
		if b, ok := backends.Of(kind); ok && b.ExpiresByClock {
			a.live[name] = time.Time{}
		}
	}
	return a
}

func rulesThresholds(rules []alert.Rule) []alert.Thresholds {
	out := make([]alert.Thresholds, len(rules))
	for i, r := range rules {
		out[i] = r.Thresholds
	}
	return out
}

// ownSourcesOnly makes alerting evaluate only the sources gain hands it,
// until lose takes them back: with replication, each source's alerts are
// sent by its owner alone. Call it before follow.
func (a *alerting) ownSourcesOnly(log *slog.Logger) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.owned = make(map[string]*owned)
	a.log = log
}

// gain starts evaluating source, which this replica has just been granted
// and fenced: nothing of the previous owner's lands in the store after this.
func (a *alerting) gain(source string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owned != nil && a.owned[source] == nil {
		a.owned[source] = &owned{}
	}
}

// lose stops evaluating source, whose ownership has ended here, and forgets
// its alerts without sending them resolved: they have not ended, and the
// source's new owner goes on sending them (the same labels, so the same
// alert in Alertmanager). Call it before the recorder gives the source up,
// so that no evaluation sees its locks gone and resolves their alerts.
func (a *alerting) lose(source string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.owned == nil {
		return
	}
	delete(a.owned, source)
	a.lost = append(a.lost, source)
	if _, ok := a.live[source]; ok {
		a.live[source] = time.Time{} // judged again only once its collector vouches, on a next grant
	}
	a.firing = slices.DeleteFunc(a.firing, func(al alert.Alert) bool { return al.Labels[alert.LabelSource] == source })
	a.findings = slices.DeleteFunc(a.findings, func(f audit.Finding) bool { return f.Lock.Source == source })
}

// evaluates reports whether source's locks are evaluated here; a.mu must be
// held.
func (a *alerting) evaluates(source string) bool {
	if a.owned == nil {
		return true
	}
	o := a.owned[source]
	return o != nil && o.live
}

// follow makes alerting look locks up with peek and schedules every lock in
// store (the recorder's Fresh view, whose rows carry renewals the last sync
// has not written). Locks that commits have changed meanwhile are as new in
// store as the commits said.
func (a *alerting) follow(ctx context.Context, peek peekFunc, store audit.Reads) error {
	a.mu.Lock()
	a.peek, a.store = peek, store
	a.mu.Unlock()
	return a.schedule(ctx, "")
}

// schedule puts the locks of source in the store (every source's, if
// empty) on the watch list.
func (a *alerting) schedule(ctx context.Context, source string) error {
	const page = audit.MaxLockLimit                    // the most one read returns
	f := audit.LockFilter{Source: source, Limit: page} // every class and state
	store := a.store
	for {
		locks, err := store.Locks(ctx, f)
		if err != nil {
			return err
		}
		a.mu.Lock()
		for _, l := range locks {
			a.watch.Update(l)
		}
		a.mu.Unlock()
		if len(locks) < page {
			return nil
		}
		f.After = locks[len(locks)-1].ID
	}
}

// Committed schedules the locks commit c changed or renewed, and collects
// the new findings: alerting is a recorder subscriber.
func (a *alerting) Committed(c audit.Commit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, st := range c.Batch.Locks {
		a.watch.Update(st.Lock)
	}
	if len(c.Renewals) > 0 && a.peek != nil {
		a.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
			for _, rn := range c.Renewals {
				if l, ok := lock(rn.Lock); ok {
					a.watch.Update(l)
				}
			}
		})
	}
	a.findings = append(a.findings, c.Batch.Findings...)
	for _, in := range c.Inputs {
		if in.Live && in.At.After(a.live[in.Source]) {
			a.live[in.Source] = in.At
		}
	}
}

// run evaluates every second until ctx ends.
func (a *alerting) run(ctx context.Context) {
	t := time.NewTicker(evaluateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			a.evaluate(now)
		}
	}
}

// evaluate runs the evaluator once at now and keeps, and hands on, what it
// says.
func (a *alerting) evaluate(now time.Time) {
	sources := a.sources()
	a.mu.Lock()
	lost, resume, live := a.advance(sources)
	a.mu.Unlock()
	if len(lost)+len(resume)+len(live) > 0 {
		a.takeUp(now, lost, resume, live) // reads the store: unlocked
	}
	a.mu.Lock()
	a.buf = a.relevant(now, a.buf[:0])
	in := alert.Input{Findings: a.findings, Sources: a.ownedOnly(sources), Locks: a.buf, Live: maps.Clone(a.live)}
	a.findings = nil
	a.mu.Unlock()
	// The evaluator and buf are this goroutine's alone, so the evaluation
	// runs unlocked: a commit (Committed) takes a.mu, and
	// a commit must not wait for thousands of firing alerts to be ordered.
	out := a.eval.Evaluate(now, in)
	a.mu.Lock()
	out = a.stillOwned(out)
	firing := make([]alert.Alert, 0, len(out))
	var resolved []alert.Alert
	for _, al := range out {
		if al.Firing() {
			firing = append(firing, al)
		} else {
			resolved = append(resolved, al)
		}
	}
	a.firing = firing
	slices.Reverse(resolved)
	a.resolved = append(resolved, a.resolved...)
	if len(a.resolved) > maxResolved {
		a.resolved = a.resolved[:maxResolved]
	}
	a.mu.Unlock()
	if a.notify != nil {
		if send := a.toSend(now, out); len(send) > 0 {
			a.notify(send)
		}
	}
}

// advance returns, with replication, the sources given up since the last
// evaluation, those granted whose alerts are still to be read back, and
// those whose collectors have come up since their grant, which it marks
// live. The findings of sources not yet resumed are left to the read back,
// which finds them in the store. a.mu must be held.
func (a *alerting) advance(sources []audit.Source) (lost, resume, live []string) {
	if a.owned == nil {
		return nil, nil, nil
	}
	lost, a.lost = a.lost, nil
	for name, o := range a.owned {
		if !o.resumed {
			resume = append(resume, name)
		}
	}
	for _, src := range sources {
		if o := a.owned[src.Name]; o != nil && !o.live && src.State == audit.SourceUp {
			o.live = true
			live = append(live, src.Name)
		}
	}
	if len(resume) > 0 {
		a.findings = slices.DeleteFunc(a.findings, func(f audit.Finding) bool {
			o := a.owned[f.Lock.Source]
			return o == nil || !o.resumed
		})
	}
	return lost, resume, live
}

// ownedOnly returns the states of the sources evaluated here. a.mu must be
// held.
func (a *alerting) ownedOnly(sources []audit.Source) []audit.Source {
	if a.owned == nil {
		return sources
	}
	out := make([]audit.Source, 0, len(sources))
	for _, src := range sources {
		if a.owned[src.Name] != nil {
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
func (a *alerting) takeUp(now time.Time, lost, resume, live []string) {
	for _, source := range lost {
		a.eval.Forget(source)
		maps.DeleteFunc(a.sent, func(_, s string) bool { return s == source }) // sent at once if it comes back
	}
	ctx, cancel := context.WithTimeout(context.Background(), readBackTimeout)
	defer cancel()
	for _, source := range resume {
		findings, err := a.readBack(ctx, now, source)
		if err != nil {
			a.log.Error("read a granted source's findings back for its alerts; will retry", "source", source, "err", err)
			continue
		}
		var locks []audit.Lock
		a.mu.Lock()
		if o := a.owned[source]; o != nil {
			o.resumed = true
			a.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
				for _, f := range findings {
					if l, ok := lock(f.Lock); ok {
						locks = append(locks, l)
					}
				}
			})
		} else {
			findings = nil // lost again meanwhile
		}
		a.mu.Unlock()
		a.eval.Resume(now, findings, locks)
	}
	for _, source := range live {
		if err := a.schedule(ctx, source); err != nil {
			a.log.Error("read a granted source's locks for its alerts; will retry", "source", source, "err", err)
			a.mu.Lock()
			if o := a.owned[source]; o != nil {
				o.live = false
			}
			a.mu.Unlock()
		}
	}
}

// readBack returns the findings of source that can still hold an alert at
// now: those within the longest LostHold, FencingHold or FlappingHold of any
// rule, and leaderless findings of any age, whose alert fires until the
// lock is held again.
func (a *alerting) readBack(ctx context.Context, now time.Time, source string) ([]audit.Finding, error) {
	from := now.Add(-a.longestHold)
	var out []audit.Finding
	for _, f := range []audit.FindingFilter{
		{Source: source, Kind: audit.FindingLeaseExpired, TimeFilter: audit.TimeFilter{From: from}},
		{Source: source, Severity: audit.SeverityCritical, TimeFilter: audit.TimeFilter{From: from}},
		{Source: source, Kind: audit.FindingFlapping, TimeFilter: audit.TimeFilter{From: from}},
		{Source: source, Kind: audit.FindingLeaderless},
	} {
		f.Limit = audit.MaxListLimit
		for page := 0; page < maxReadBackPages; page++ {
			fs, err := a.store.Findings(ctx, f)
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
// and an evaluation in between must not resolve the source's alerts. a.mu
// must be held.
func (a *alerting) stillOwned(out []alert.Alert) []alert.Alert {
	if a.owned == nil || a.peek == nil {
		return out
	}
	var gone map[audit.LockKey]bool
	a.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
		for _, al := range out {
			k := audit.LockKey{Source: al.Labels[alert.LabelSource], Name: al.Labels[alert.LabelLock]}
			if al.Firing() || k.Name == "" {
				continue
			}
			if _, ok := lock(k); !ok {
				if gone == nil {
					gone = make(map[audit.LockKey]bool)
				}
				gone[k] = true
			}
		}
	})
	return slices.DeleteFunc(out, func(al alert.Alert) bool {
		source := al.Labels[alert.LabelSource]
		return a.owned[source] == nil || gone[audit.LockKey{Source: source, Name: al.Labels[alert.LabelLock]}]
	})
}

// relevant appends to buf the locks an evaluation at now needs (see
// alert.Input.Locks), as the tracker has them: those the watch list has
// due, and those the new findings and the firing alerts that resolve on a
// grant (LeaseLost, Leaderless) name.
// a.mu must be held.
func (a *alerting) relevant(now time.Time, buf []audit.Lock) []audit.Lock {
	if a.peek == nil {
		return buf
	}
	a.peek(func(tracked func(audit.LockKey) (audit.Lock, bool)) {
		// The locks of sources not evaluated here are as if gone: the
		// watch list drops them, and schedule puts them back when their
		// source is taken up.
		lock := func(k audit.LockKey) (audit.Lock, bool) {
			if !a.evaluates(k.Source) {
				return audit.Lock{}, false
			}
			return tracked(k)
		}
		seen := make(map[audit.LockKey]bool)
		add := func(k audit.LockKey) {
			if l, ok := lock(k); ok && !seen[k] {
				seen[k] = true
				buf = append(buf, l)
			}
		}
		for _, k := range a.watch.Due(now, a.live, lock) {
			add(k)
		}
		for _, f := range a.findings {
			add(f.Lock)
		}
		for _, al := range a.firing {
			if alert.ResolvesOnGrant(al.Name()) {
				add(audit.LockKey{Source: al.Labels[alert.LabelSource], Name: al.Labels[alert.LabelLock]})
			}
		}
	})
	return buf
}

// toSend returns what of an evaluation's result notify needs: every alert
// when a re-send is due, else the alerts that began firing and those that
// resolved.
func (a *alerting) toSend(now time.Time, out []alert.Alert) []alert.Alert {
	if now.Sub(a.lastResend) >= a.resendEvery {
		a.lastResend = now
		clear(a.sent)
		for _, al := range out {
			if al.Firing() {
				a.sent[al.Fingerprint()] = al.Labels[alert.LabelSource]
			}
		}
		return out
	}
	var send []alert.Alert
	for _, al := range out {
		fp := al.Fingerprint()
		switch {
		case !al.Firing():
			delete(a.sent, fp)
			send = append(send, al)
		case a.sent[fp] == "":
			a.sent[fp] = al.Labels[alert.LabelSource]
			send = append(send, al)
		}
	}
	return send
}

// alerts returns the firing alerts and the recently resolved ones, newest
// first, for the alerts page.
func (a *alerting) alerts() (firing, resolved []alert.Alert) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.firing), slices.Clone(a.resolved)
}

// registerSenderMetrics exports the Alertmanager sender's counts.
func registerSenderMetrics(reg prometheus.Registerer, s *alert.Sender) {
	counter := func(name, help string, v func(alert.SenderStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(s.Stats())) })
	}
	reg.MustRegister(
		counter("leasewatch_alertmanager_alerts_sent_total", "Alerts Alertmanager accepted, counted once per Alertmanager URL.",
			func(st alert.SenderStats) uint64 { return st.Sent }),
		counter("leasewatch_alertmanager_send_failures_total", "POSTs to Alertmanager that failed and will be retried.",
			func(st alert.SenderStats) uint64 { return st.Failed }),
		counter("leasewatch_alertmanager_alerts_dropped_total", "Alerts dropped: a full queue's oldest, or a batch Alertmanager rejected.",
			func(st alert.SenderStats) uint64 { return st.Dropped }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "leasewatch_alertmanager_alerts_queued", Help: "Alerts waiting to be sent, over every Alertmanager URL."},
			func() float64 { return float64(s.Stats().Queued) }),
	)
}
