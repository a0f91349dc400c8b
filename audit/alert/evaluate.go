package alert

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Input is what the service knows at an evaluation.
//
// A lease lost while held reaches the evaluator as a lease_expired finding,
// not as an expire event: the tracker raises that finding exactly when a
// tenure ends by expiry, seen by the backend or inferred from its clock alike,
// and it arrives with the critical findings in the same Batch.Findings, so the
// service passes one small stream (events include every renewal) and the
// evaluator reads lock and holder from one place.
//
// LeaseLost resolves at the first evaluation after the lock's next grant,
// but never at the evaluation that first reports it firing: contenders wait
// on the lock, so the next grant often comes milliseconds after the expiry,
// and a sender must see the alert fire before it resolves. Without a grant,
// it resolves after a hold-down (Thresholds.LostHold) since the latest loss.
type Input struct {
	// Locks are the tracker's locks, in any state. Held ones are watched
	// for near expiry; every one lends its class to the findings on it (a
	// finding on a lock not listed counts as class lock). A caller with many
	// locks may pass only those that can matter: every held lock with no
	// more than Config.WidestMargin of its lease left, every lock a finding
	// names and every lock of a firing alert that ResolvesOnGrant.
	Locks []audit.Lock
	// Findings are those raised since the previous evaluation.
	Findings []audit.Finding
	// Sources are the collectors' states.
	Sources []audit.Source
	// Live is, per source, the time up to which its collector has delivered
	// every change (audit.Input.Live); zero until it first says so. A
	// source listed has its leases judged near expiry as of then, never
	// later: a renewal the collector has not delivered yet may well have
	// happened, and a collector that falls behind must not make every
	// lease look late. A source not listed is judged at now.
	Live map[string]time.Time
}

// asOf is the time a lease of source is judged at: now, or the time up to
// which its collector has delivered every change, if earlier.
func asOf(now time.Time, live map[string]time.Time, source string) time.Time {
	if t, ok := live[source]; ok && t.Before(now) {
		return t
	}
	return now
}

// Evaluator turns inputs into alerts. It remembers the alerts that fire, so
// it is not safe for concurrent use; time comes only from Evaluate's caller.
type Evaluator struct {
	cfg    Config
	active map[string]*active // by fingerprint
	// downSince is when the evaluator first saw a source down that does
	// not say since when it is blind (a collector that never connected).
	downSince map[string]time.Time
	// near keeps each LeaseNearExpiry alert with the lease it describes, so
	// that a lease unchanged since the last evaluation costs a comparison:
	// a backlog can leave thousands of leases near expiry at once, and
	// evaluation runs several times a second.
	near map[audit.LockKey]nearAlert
}

// nearAlert is a LeaseNearExpiry alert and the lease it was made from.
type nearAlert struct {
	holder               string
	expiresAt, renewedAt time.Time
	lease, margin        time.Duration
	ranOut               bool
	alert                Alert
}

// active is a firing alert and what decides when it resolves.
type active struct {
	Alert
	// LeaseLost and FencingViolation fire for hold after their latest
	// finding, last.
	last  time.Time
	hold  time.Duration
	kinds []audit.FindingKind // FencingViolation: every kind seen, in order
	shown bool                // Evaluate has returned it firing
}

// New returns an evaluator with nothing firing. cfg's rules should be valid
// (see audit.ValidPattern); a rule whose pattern is malformed never matches.
func New(cfg Config) *Evaluator {
	return &Evaluator{cfg: cfg, active: make(map[string]*active), downSince: make(map[string]time.Time),
		near: make(map[audit.LockKey]nearAlert)}
}

// Evaluate returns every alert firing at now, followed by those that resolved
// since the previous evaluation (EndsAt now), each reported resolved once. A
// condition that still holds keeps its fingerprint and StartsAt, so a sender
// may re-send the firing alerts every time. Within each group, alerts are
// ordered by name, source, lock and holder. The alerts share their label and
// annotation maps with the evaluator and with earlier results: read them,
// and copy them before changing them (as Sender does).
func (e *Evaluator) Evaluate(now time.Time, in Input) []Alert {
	current := make(map[string]Alert)
	e.nearExpiry(now, in.Live, in.Locks, current)
	e.blind(now, in.Sources, current)
	// The locks by key, only when a finding or a lost lease needs them:
	// evaluation runs several times a second over every lock.
	var locks map[audit.LockKey]audit.Lock
	if len(in.Findings) > 0 || e.anyActive(ResolvesOnGrant) {
		locks = make(map[audit.LockKey]audit.Lock, len(in.Locks))
		for _, l := range in.Locks {
			locks[l.Key()] = l
		}
	}
	if len(in.Findings) > 0 {
		e.findings(in.Findings, locks)
	}

	var firing, resolved []Alert
	for fp, a := range e.active {
		if e.holds(now, a, current, locks) {
			a.shown = true
			firing = append(firing, a.Alert)
			continue
		}
		a.EndsAt = now
		resolved = append(resolved, a.Alert)
		delete(e.active, fp)
		if a.Name() == LeaseNearExpiry {
			delete(e.near, audit.LockKey{Source: a.Labels[LabelSource], Name: a.Labels[LabelLock]})
		}
	}
	for fp, a := range current { // what holds() left: newly firing
		e.active[fp] = &active{Alert: a}
		firing = append(firing, a)
	}
	order(firing)
	order(resolved)
	return append(firing, resolved...)
}

// anyActive reports whether an alert fires whose name is one of named.
func (e *Evaluator) anyActive(named func(string) bool) bool {
	for _, a := range e.active {
		if named(a.Name()) {
			return true
		}
	}
	return false
}

// holds reports whether a still fires, refreshing its annotations from the
// condition that keeps it firing. LeaseLost ends once the lock has been
// granted again after the loss (and the alert was reported firing at least
// once), or after its hold without a grant; Leaderless only by such a grant.
func (e *Evaluator) holds(now time.Time, a *active, current map[string]Alert, locks map[audit.LockKey]audit.Lock) bool {
	if name := a.Name(); ResolvesOnGrant(name) && a.shown {
		l, ok := locks[audit.LockKey{Source: a.Labels[LabelSource], Name: a.Labels[LabelLock]}]
		if ok && l.State == audit.StateHeld && l.ChangedAt.After(a.last) {
			return false
		}
	}
	if a.Name() == Leaderless {
		return true
	}
	if a.hold > 0 {
		return now.Before(a.last.Add(a.hold))
	}
	fp := a.Fingerprint()
	c, ok := current[fp]
	if ok {
		a.Annotations = c.Annotations
		delete(current, fp)
	}
	return ok
}

// Forget drops every alert of source without reporting it resolved, as a
// replica does when another takes the source over: the condition has not
// ended, and the new owner goes on sending the same alert (same labels, so
// Alertmanager keeps one). A resolve sent here would flap it.
func (e *Evaluator) Forget(source string) {
	for fp, a := range e.active {
		if a.Labels[LabelSource] == source {
			delete(e.active, fp)
		}
	}
	for k := range e.near {
		if k.Source == source {
			delete(e.near, k)
		}
	}
	delete(e.downSince, source)
}

// Resume takes over, from findings another evaluator saw (a source's
// findings read back from the store by the replica that took the source
// over), the alerts findings raise that still fire at now: those whose hold
// has not run out, and, for LeaseLost and Leaderless, whose lock (as locks
// has it) has not been granted again since the loss. They keep their
// labels and start, the finding's time, and count as reported firing, so
// they resolve as they would have where they started. Findings of alerts
// that have ended start nothing, rather than firing again what was
// resolved. Alerts already firing here are only extended, as by Evaluate.
func (e *Evaluator) Resume(now time.Time, findings []audit.Finding, locks []audit.Lock) {
	byKey := make(map[audit.LockKey]audit.Lock, len(locks))
	for _, l := range locks {
		byKey[l.Key()] = l
	}
	before := make(map[string]bool, len(e.active))
	for fp := range e.active {
		before[fp] = true
	}
	e.findings(findings, byKey)
	for fp, a := range e.active {
		if before[fp] {
			continue
		}
		a.shown = true // the previous owner reported it firing
		if !e.holds(now, a, nil, byKey) {
			delete(e.active, fp)
		}
	}
}

// watched reports whether alerts cover locks of class c.
func (e *Evaluator) watched(c audit.Class) bool {
	return c != audit.ClassHeartbeat || e.cfg.IncludeHeartbeats
}

// nearExpiry adds a LeaseNearExpiry alert for every watched held lease with
// less than its margin left (as of asOf); it starts when the lease crossed the
// margin. Its summary dates the expiry rather than counting down to it, so the
// alert of a lease that has not changed is the one the previous evaluation
// made.
func (e *Evaluator) nearExpiry(now time.Time, live map[string]time.Time, locks []audit.Lock, current map[string]Alert) {
	for _, l := range locks {
		if l.State != audit.StateHeld || !e.watched(l.Class) || l.ExpiresAt.IsZero() || l.LeaseDuration <= 0 {
			continue
		}
		margin := time.Duration(e.cfg.For(l.Source, l.Name).RenewMarginRatio * float64(l.LeaseDuration))
		left := l.ExpiresAt.Sub(asOf(now, live, l.Source))
		if left >= margin {
			continue
		}
		key := l.Key()
		n := nearAlert{holder: l.Holder, expiresAt: l.ExpiresAt, renewedAt: l.RenewedAt, lease: l.LeaseDuration, margin: margin, ranOut: left <= 0}
		if memo, ok := e.near[key]; ok && memo.same(n) {
			current[memo.alert.Fingerprint()] = memo.alert
			continue
		}
		summary := fmt.Sprintf("%s's %s lease on %s expires at %s, within its last %s, and has not been renewed since %s",
			orUnknown(l.Holder), l.LeaseDuration, key, clock(l.ExpiresAt), margin, clock(l.RenewedAt))
		if n.ranOut {
			summary = fmt.Sprintf("%s's %s lease on %s ran out at %s without a renewal (last renewed %s); leasewatch has not yet seen it expire",
				orUnknown(l.Holder), l.LeaseDuration, key, clock(l.ExpiresAt), clock(l.RenewedAt))
		}
		n.alert = newAlert(LeaseNearExpiry, audit.SeverityWarning, l.Source, l.Name, l.Holder, l.ExpiresAt.Add(-margin), summary)
		e.near[key] = n
		current[n.alert.Fingerprint()] = n.alert
	}
}

// same reports whether m and n describe the same lease in the same state.
func (m nearAlert) same(n nearAlert) bool {
	return m.holder == n.holder && m.expiresAt.Equal(n.expiresAt) && m.renewedAt.Equal(n.renewedAt) &&
		m.lease == n.lease && m.margin == n.margin && m.ranOut == n.ranOut
}

// blind adds a CollectorBlind alert for every source blind for BlindAfter or
// longer; it starts when the source had been blind that long.
func (e *Evaluator) blind(now time.Time, sources []audit.Source, current map[string]Alert) {
	down := make(map[string]bool, len(sources))
	for _, s := range sources {
		since := s.BlindSince
		if since.IsZero() && s.State == audit.SourceDown {
			down[s.Name] = true
			if _, ok := e.downSince[s.Name]; !ok {
				e.downSince[s.Name] = now
			}
			since = e.downSince[s.Name]
		}
		if since.IsZero() {
			continue
		}
		after := e.cfg.For(s.Name, "").BlindAfter
		if now.Sub(since) < after {
			continue
		}
		summary := fmt.Sprintf("the %s collector has not seen its backend for %s, since %s: lock changes there go unrecorded",
			s.Name, now.Sub(since).Round(time.Second), stamp(since))
		if s.Error != "" {
			summary += " (" + s.Error + ")"
		}
		a := newAlert(CollectorBlind, audit.SeverityWarning, s.Name, "", "", since.Add(after), summary)
		current[a.Fingerprint()] = a
	}
	for name := range e.downSince {
		if !down[name] {
			delete(e.downSince, name)
		}
	}
}

// findings starts or extends the alerts that findings raise: LeaseLost,
// FencingViolation, Leaderless and LeadershipFlapping.
func (e *Evaluator) findings(findings []audit.Finding, locks map[audit.LockKey]audit.Lock) {
	for _, f := range findings {
		if l, ok := locks[f.Lock]; ok && !e.watched(l.Class) {
			continue
		}
		sev := f.Severity
		if sev == "" {
			sev = f.Kind.Severity()
		}
		th := e.cfg.For(f.Lock.Source, f.Lock.Name)
		var a Alert
		var hold time.Duration
		switch {
		case f.Kind == audit.FindingLeaseExpired:
			holder := ""
			if len(f.Holders) > 0 {
				holder = f.Holders[0]
			}
			a = newAlert(LeaseLost, audit.SeverityWarning, f.Lock.Source, f.Lock.Name, holder, f.At,
				fmt.Sprintf("%s lost %s: its lease expired while it held the lock, and it may still act as if it held it", orUnknown(holder), f.Lock))
			hold = th.LostHold
		case f.Kind == audit.FindingLeaderless:
			a = newAlert(Leaderless, audit.SeverityWarning, f.Lock.Source, f.Lock.Name, "", f.At,
				fmt.Sprintf("nobody has held %s since %s: whatever it elects or guards has no owner", f.Lock, stamp(f.At)))
		case f.Kind == audit.FindingFlapping:
			a = newAlert(LeadershipFlapping, audit.SeverityWarning, f.Lock.Source, f.Lock.Name, "", f.At,
				fmt.Sprintf("leadership of %s keeps changing hands: more grants within an hour than its holders should need", f.Lock))
			hold = FlappingHold
		case sev == audit.SeverityCritical:
			// One alert per lock, whoever the holders: its labels must not
			// change while it fires.
			a = newAlert(FencingViolation, audit.SeverityCritical, f.Lock.Source, f.Lock.Name, "", f.At, "")
			hold = th.FencingHold
		default:
			continue
		}
		a.Annotations[AnnotationDescription] = f.Summary
		fp := a.Fingerprint()
		cur, ok := e.active[fp]
		if !ok {
			cur = &active{Alert: a, last: f.At}
			e.active[fp] = cur
		}
		cur.Annotations, cur.hold = a.Annotations, hold
		if f.At.After(cur.last) {
			cur.last = f.At
		}
		if a.Name() == FencingViolation {
			if !slices.Contains(cur.kinds, f.Kind) {
				cur.kinds = append(cur.kinds, f.Kind)
			}
			cur.Annotations[AnnotationSummary] = fencingSummary(f.Lock, cur.kinds)
		}
	}
}

func fencingSummary(key audit.LockKey, kinds []audit.FindingKind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return fmt.Sprintf("fencing failed on %s (%s): its tokens did not keep two holders' writes apart", key, strings.Join(names, ", "))
}

func newAlert(name string, sev audit.Severity, source, lock, holder string, startsAt time.Time, summary string) Alert {
	labels := map[string]string{LabelAlertName: name, LabelSeverity: string(sev), LabelSource: source}
	if lock != "" {
		labels[LabelLock] = lock
	}
	if holder != "" {
		labels[LabelHolder] = holder
	}
	return Alert{Labels: labels, Annotations: map[string]string{AnnotationSummary: summary}, StartsAt: startsAt,
		fp: fingerprint(labels), ids: &[4]string{name, source, lock, holder}}
}

func order(alerts []Alert) {
	// The labels are read once per alert, not once per comparison, and
	// indexes are sorted rather than alerts: many leases lost at once make
	// thousands of alerts to order each evaluation.
	keys := make([][4]string, len(alerts))
	idx := make([]int, len(alerts))
	for i, a := range alerts {
		keys[i] = a.sortKey()
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		if c := slices.Compare(keys[i][:], keys[j][:]); c != 0 {
			return c
		}
		return alerts[i].StartsAt.Compare(alerts[j].StartsAt)
	})
	sorted := make([]Alert, len(alerts))
	for k, i := range idx {
		sorted[k] = alerts[i]
	}
	copy(alerts, sorted)
}

func orUnknown(holder string) string {
	if holder == "" {
		return "an unknown holder"
	}
	return holder
}

// clock is t to the millisecond, for leases a few seconds long.
func clock(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}
