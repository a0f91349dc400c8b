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
// database: it starts from the lock rows and then takes every commit's
// changed locks and renewals, so a renewal clears a near-expiry alert at
// once although the rows get it only at the next sync. Every evaluateEvery
// it evaluates the locks, the findings committed since and the collectors'
// health. It hands notify (an Alertmanager sender), if any, the alerts that
// started or resolved, and every firing alert again each resendEvery.
type alerting struct {
	eval        *alert.Evaluator
	sources     func() []audit.Source
	notify      func([]alert.Alert)
	resendEvery time.Duration
	sent        map[string]bool // fingerprints of the firing alerts notify has had
	lastResend  time.Time

	mu       sync.Mutex
	locks    map[audit.LockKey]lease
	live     map[string]time.Time // alert.Input.Live
	watch    *alert.WatchList
	findings []audit.Finding // committed since the last evaluation
	buf      []audit.Lock    // the locks of an evaluation, reused
	firing   []alert.Alert
	resolved []alert.Alert // newest first
}

// newAlerting returns an alerting with no locks yet: pass its observe to the
// recorder as a commit hook, then load the locks once the recorder has
// started. kinds are the configured sources: the leases of those whose
// collectors vouch for being live are judged only as far as they have, and
// not at all before they first do (the stored rows are as old as the last
// run).
func newAlerting(cfg alert.Config, kinds map[string]audit.SourceKind, sources func() []audit.Source, notify func([]alert.Alert), resendEvery time.Duration) *alerting {
	a := &alerting{eval: alert.New(cfg), sources: sources, notify: notify, resendEvery: resendEvery,
		locks: make(map[audit.LockKey]lease), live: make(map[string]time.Time), sent: make(map[string]bool),
		watch: alert.NewWatchList(cfg)}
	for name, kind := range kinds {
		if kind.ExpiresByClock() {
			a.live[name] = time.Time{}
		}
	}
	return a
}

// load reads every lock from store (the recorder's Fresh view, whose rows
// carry renewals the last sync has not written). Locks that commits have
// changed meanwhile are as new in store as in the hook's copy.
func (a *alerting) load(ctx context.Context, store audit.Store) error {
	const page = 5000
	f := audit.LockFilter{Limit: page} // every class, state and source
	for {
		locks, err := store.Locks(ctx, f)
		if err != nil {
			return err
		}
		a.mu.Lock()
		for _, l := range locks {
			a.keep(l)
		}
		a.mu.Unlock()
		if len(locks) < page {
			return nil
		}
		f.After = locks[len(locks)-1].ID
	}
}

// lease is what alerting keeps of a lock: what evaluation reads of it, in
// under half the room of an audit.Lock (at 100,000 locks the whole rows
// took 42 MB). Times are Unix nanoseconds, 0 for the zero time.
type lease struct {
	holder                          string
	class                           audit.Class
	state                           audit.LockState
	renewedAt, expiresAt, changedAt int64
	duration                        time.Duration
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// keep records l as the tracker now has it and schedules it. a.mu must be
// held.
func (a *alerting) keep(l audit.Lock) {
	a.locks[l.Key()] = lease{holder: l.Holder, class: l.Class, state: l.State, renewedAt: unixNano(l.RenewedAt),
		expiresAt: unixNano(l.ExpiresAt), changedAt: unixNano(l.ChangedAt), duration: l.LeaseDuration}
	a.watch.Update(l)
}

// lock returns the lock k as alerting keeps it. a.mu must be held.
func (a *alerting) lock(k audit.LockKey) (audit.Lock, bool) {
	s, ok := a.locks[k]
	if !ok {
		return audit.Lock{}, false
	}
	return audit.Lock{Source: k.Source, Name: k.Name, Holder: s.holder, Class: s.class, State: s.state,
		RenewedAt: fromUnixNano(s.renewedAt), ExpiresAt: fromUnixNano(s.expiresAt), ChangedAt: fromUnixNano(s.changedAt),
		LeaseDuration: s.duration}, true
}

// observe is the recorder's commit hook: it keeps the locks as the tracker
// has them and collects the new findings.
func (a *alerting) observe(c audit.Commit) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, st := range c.Batch.Locks {
		a.keep(st.Lock)
	}
	for _, rn := range c.Renewals {
		if l, ok := a.lock(rn.Lock); ok {
			l.RenewedAt, l.ExpiresAt, l.LeaseDuration = rn.RenewedAt, rn.ExpiresAt, rn.LeaseDuration
			a.keep(l)
		}
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

// toSend returns what of an evaluation's result notify needs: every alert
// when a re-send is due, else the alerts that began firing and those that
// resolved.
// relevant appends to buf the locks an evaluation at now needs (see
// alert.Input.Locks): those the watch list has due, and those the new
// findings and the firing LeaseLost alerts name. a.mu must be held.
func (a *alerting) relevant(now time.Time, buf []audit.Lock) []audit.Lock {
	seen := make(map[audit.LockKey]bool)
	add := func(k audit.LockKey) {
		if l, ok := a.lock(k); ok && !seen[k] {
			seen[k] = true
			buf = append(buf, l)
		}
	}
	for _, k := range a.watch.Due(now, a.live, a.lock) {
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
	return buf
}

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
