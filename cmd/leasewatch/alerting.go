package main

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
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
type alerting struct {
	eval        *alert.Evaluator
	sources     func() []audit.Source
	notify      func([]alert.Alert)
	resendEvery time.Duration
	sent        map[string]bool // fingerprints of the firing alerts notify has had
	lastResend  time.Time

	mu       sync.Mutex
	peek     peekFunc             // nil until follow
	live     map[string]time.Time // alert.Input.Live
	watch    *alert.WatchList
	findings []audit.Finding // committed since the last evaluation
	buf      []audit.Lock    // the locks of an evaluation, reused
	firing   []alert.Alert
	resolved []alert.Alert // newest first
}

// peekFunc calls fn with a look-up of the locks as the tracker has them:
// audit.Recorder.Peek.
type peekFunc func(fn func(lock func(audit.LockKey) (audit.Lock, bool)))

// newAlerting returns an alerting that follows no tracker yet: pass its
// observe to the recorder as a commit hook, then call follow once the
// recorder has started. kinds are the configured sources: the leases of
// those whose collectors vouch for being live are judged only as far as they
// have, and not at all before they first do (the stored rows are as old as
// the last run).
func newAlerting(cfg alert.Config, kinds map[string]audit.SourceKind, sources func() []audit.Source, notify func([]alert.Alert), resendEvery time.Duration) *alerting {
	a := &alerting{eval: alert.New(cfg), sources: sources, notify: notify, resendEvery: resendEvery,
		live: make(map[string]time.Time), sent: make(map[string]bool), watch: alert.NewWatchList(cfg)}
	for name, kind := range kinds {
		if kind.ExpiresByClock() {
			a.live[name] = time.Time{}
		}
	}
	return a
}

// follow makes alerting look locks up with peek and schedules every lock in
// store (the recorder's Fresh view, whose rows carry renewals the last sync
// has not written). Locks that commits have changed meanwhile are as new in
// store as the commits said.
func (a *alerting) follow(ctx context.Context, peek peekFunc, store audit.Store) error {
	a.mu.Lock()
	a.peek = peek
	a.mu.Unlock()
	const page = audit.MaxLockLimit    // the most one read returns
	f := audit.LockFilter{Limit: page} // every class, state and source
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

// observe is the recorder's commit hook: it schedules the locks the commit
// changed or renewed, and collects the new findings.
func (a *alerting) observe(c audit.Commit) {
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
	a.buf = a.relevant(now, a.buf[:0])
	in := alert.Input{Findings: a.findings, Sources: sources, Locks: a.buf, Live: maps.Clone(a.live)}
	a.findings = nil
	a.mu.Unlock()
	// The evaluator and buf are this goroutine's alone, so the evaluation
	// runs unlocked: the recorder's commit hook (observe) takes a.mu, and
	// a commit must not wait for thousands of firing alerts to be ordered.
	out := a.eval.Evaluate(now, in)
	firing := make([]alert.Alert, 0, len(out))
	var resolved []alert.Alert
	for _, al := range out {
		if al.Firing() {
			firing = append(firing, al)
		} else {
			resolved = append(resolved, al)
		}
	}
	a.mu.Lock()
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

// relevant appends to buf the locks an evaluation at now needs (see
// alert.Input.Locks), as the tracker has them: those the watch list has
// due, and those the new findings and the firing LeaseLost alerts name.
// a.mu must be held.
func (a *alerting) relevant(now time.Time, buf []audit.Lock) []audit.Lock {
	if a.peek == nil {
		return buf
	}
	a.peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
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
			if al.Name() == alert.LeaseLost {
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
				a.sent[al.Fingerprint()] = true
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
		case !a.sent[fp]:
			a.sent[fp] = true
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
