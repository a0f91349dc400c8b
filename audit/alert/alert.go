// Package alert evaluates leasewatch's live alerts: leases near expiry, leases
// lost while held, fencing violations, blind collectors, and leadership that
// flaps or is missing. The Evaluator is pure: the caller passes the time and
// what the tracker and the collectors know now, and gets back the alerts that
// fire and those that just resolved, ready for a sender (Alertmanager) or a
// page. The Keeper feeds it from the recorder's commits (a subscriber) and the
// tracker, and hands a source's alerts over between replicas.
//
// Besides audit, it imports only the standard library.
package alert

import (
	"hash/fnv"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Alert names (contract with rules and receivers: these are the alertname label).
const (
	LeaseNearExpiry  = "LeaseNearExpiry"
	LeaseLost        = "LeaseLost"
	FencingViolation = "FencingViolation"
	CollectorBlind   = "CollectorBlind"
	// Leaderless fires from a leaderless finding and goes on firing until
	// the lock is held again, however long that takes.
	Leaderless = "Leaderless"
	// LeadershipFlapping fires from a flapping finding, for FlappingHold.
	LeadershipFlapping = "LeadershipFlapping"
)

// FlappingHold is how long LeadershipFlapping fires after a lock's latest
// flapping finding: the hour that finding counts grants over. The tracker
// raises the next one no sooner than audit.FlappingRepeat, half of it, so a
// lock that goes on flapping keeps its alert firing.
const FlappingHold = time.Hour

// ResolvesOnGrant reports whether the alert named name ends when its lock is
// granted again: a caller that passes only some locks (Input.Locks) must pass
// the lock of every such alert that fires.
func ResolvesOnGrant(name string) bool { return name == LeaseLost || name == Leaderless }

// Label and annotation names, as Alertmanager receives them.
const (
	LabelAlertName = "alertname"
	LabelSeverity  = "severity"
	LabelSource    = "source"
	LabelLock      = "lock"
	LabelHolder    = "holder"

	// AnnotationSummary says in plain words what happened.
	AnnotationSummary = "summary"
	// AnnotationDescription carries the tracker's own words, where a finding
	// raised the alert.
	AnnotationDescription = "description"
)

// Alert is one alert, firing or resolved. Its labels are its identity; its
// annotations may change while it fires.
type Alert struct {
	Labels      map[string]string
	Annotations map[string]string
	StartsAt    time.Time
	EndsAt      time.Time // zero while firing

	fp string // Fingerprint, as newAlert made it; empty: compute it
	// ids are the alertname, source, lock and holder labels, as newAlert
	// made them (order sorts by them); nil: read the labels. A pointer
	// keeps Alert small enough for a map to hold it inline.
	ids *[4]string
}

// Name returns the alertname label.
func (a Alert) Name() string {
	if a.ids != nil {
		return a.ids[0]
	}
	return a.Labels[LabelAlertName]
}

// sortKey is what alerts are ordered by: alertname, source, lock, holder.
func (a Alert) sortKey() [4]string {
	if a.ids != nil {
		return *a.ids
	}
	return [4]string{a.Labels[LabelAlertName], a.Labels[LabelSource], a.Labels[LabelLock], a.Labels[LabelHolder]}
}

// Firing reports whether the alert has not resolved.
func (a Alert) Firing() bool { return a.EndsAt.IsZero() }

// Fingerprint identifies the alert by its labels: the same condition on the
// same lock, source and holder has the same fingerprint at every evaluation.
// It hashes the sorted label pairs with FNV-1a, as Alertmanager does.
//
// Labels must not change after an alert is made: an evaluation hands out
// thousands of alerts when many leases are lost at once, and each keeps the
// fingerprint it was made with.
func (a Alert) Fingerprint() string {
	if a.fp != "" {
		return a.fp
	}
	return fingerprint(a.Labels)
}

func fingerprint(labels map[string]string) string {
	names := make([]string, 0, len(labels))
	for n := range labels {
		names = append(names, n)
	}
	slices.Sort(names)
	h := fnv.New64a()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0xff})
		h.Write([]byte(labels[n]))
		h.Write([]byte{0xff})
	}
	const hex = "0123456789abcdef"
	sum := h.Sum64()
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = hex[sum&0xf]
		sum >>= 4
	}
	return string(b[:])
}

// Thresholds tune the alerts of one lock or source. In a Rule, a zero field
// is unset: a less specific rule, or Config.Defaults, decides it.
type Thresholds struct {
	// RenewMarginRatio: a held lease with less than this fraction of its
	// duration left, and no renewal yet, is near expiry. It is the same
	// ratio that makes a renewal late (alerts.renew_margin_ratio).
	RenewMarginRatio float64
	// LostHold is how long LeaseLost fires after the lock's latest loss when
	// the lock is not granted again (see Input).
	LostHold time.Duration
	// FencingHold is how long FencingViolation fires after a lock's latest
	// critical finding.
	FencingHold time.Duration
	// BlindAfter is how long a source may be blind before CollectorBlind
	// fires. Only rules without a lock pattern set it.
	BlindAfter time.Duration
}

// Defaults for Config.Defaults fields left zero.
const (
	DefaultRenewMarginRatio = 0.25
	DefaultLostHold         = 5 * time.Minute
	DefaultFencingHold      = 15 * time.Minute
	DefaultBlindAfter       = 30 * time.Second
)

// Rule sets thresholds for the locks of one source, the locks whose names
// match a pattern, or both (audit.Selector). Source and Lock may not both be
// empty. A rule with a pattern never applies to a source as a whole
// (BlindAfter).
type Rule struct {
	audit.Selector
	Thresholds
}

// Config configures an Evaluator.
type Config struct {
	Defaults Thresholds // zero fields take the Default* constants
	// Rules override Defaults. For each threshold, the most specific
	// matching rule that sets it wins: a rule naming a source and a lock
	// beats one naming only a lock, which beats one naming only a source;
	// between rules of the same kind, an exact lock name beats a pattern and
	// a pattern with more literal characters beats one with fewer; on a tie,
	// the earlier rule wins.
	Rules []Rule
	// IncludeHeartbeats alerts on heartbeat-class leases too. By default
	// they are left out, as in the dashboard's default views.
	IncludeHeartbeats bool
}

// WidestMargin returns the largest RenewMarginRatio any lock can have: no
// held lease with more than this fraction of its duration left is near
// expiry, whatever rule applies to it.
func (c Config) WidestMargin() float64 {
	widest := c.For("", "").RenewMarginRatio
	for _, r := range c.Rules {
		widest = max(widest, r.RenewMarginRatio)
	}
	return widest
}

// For returns the thresholds that apply to lock name of source. An empty name
// asks for the source's own thresholds (BlindAfter): only rules without a
// lock pattern apply.
func (c Config) For(source, name string) Thresholds {
	t := c.Defaults
	set := func(dst *Thresholds, src Thresholds) {
		if src.RenewMarginRatio > 0 {
			dst.RenewMarginRatio = src.RenewMarginRatio
		}
		if src.LostHold > 0 {
			dst.LostHold = src.LostHold
		}
		if src.FencingHold > 0 {
			dst.FencingHold = src.FencingHold
		}
		if src.BlindAfter > 0 {
			dst.BlindAfter = src.BlindAfter
		}
	}
	var matched []int
	for i, r := range c.Rules {
		if r.Matches(source, name) {
			matched = append(matched, i)
		}
	}
	// Least specific first, so the most specific is laid over last; the
	// stable sort keeps file order among equals, and the reverse below makes
	// the earlier rule win a tie.
	slices.Reverse(matched)
	slices.SortStableFunc(matched, func(i, j int) int { return c.Rules[i].Selector.Compare(c.Rules[j].Selector) })
	for _, i := range matched {
		set(&t, c.Rules[i].Thresholds)
	}
	if t.RenewMarginRatio <= 0 {
		t.RenewMarginRatio = DefaultRenewMarginRatio
	}
	if t.LostHold <= 0 {
		t.LostHold = DefaultLostHold
	}
	if t.FencingHold <= 0 {
		t.FencingHold = DefaultFencingHold
	}
	if t.BlindAfter <= 0 {
		t.BlindAfter = DefaultBlindAfter
	}
	return t
}
