// Package advise sizes a lock's lease settings to the stalls its holders
// have had. From the gaps between one holder's writes (its grant and its
// renewals, and across an expiry to its own next grant) it gives each
// holder's and the lock's gap percentiles and longest stall, and the lease
// duration, renew deadline and retry period that would have tolerated every
// stall seen with a stated margin, with the writes per second they cost
// beside the current ones.
//
// The rule, for the longest stall S, a margin m and N retries per renew
// deadline (client-go's leaderelection settings, whose constraint is
// LeaseDuration > RenewDeadline > JitterFactor × RetryPeriod):
//
//	leaseDuration ≥ S × (1+m) + retryPeriod   a pause as long as the longest gap, begun just
//	                                          before a renewal, leaves that gap plus a retry period
//	renewDeadline = leaseDuration − retryPeriod ≥ S × (1+m)
//	                                          the holder keeps trying through the stall
//	retryPeriod ≤ renewDeadline / N           N attempts before the holder gives up
//
// The current lease is kept when it meets the rule: how long a failover
// takes is the operator's choice, which stalls say nothing against. Else the
// lease is the least that meets it, S × (1+m) × (N+1)/N. The retry period is
// then the longest the rule allows, min(lease/(N+1), lease − S × (1+m)): the
// fewest writes.
//
// Of (pure) computes from what a caller read; Load reads a bounded sample
// of one lock: the newest MaxRenewals renewals and MaxTenures tenures of a
// window.
package advise

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Defaults and bounds of Options.
const (
	DefaultMargin  = 0.5
	MaxMargin      = 10.0
	DefaultRetries = 5 // client-go's defaults' renewDeadline / retryPeriod: 10 s / 2 s
	MinRetries     = 2 // so that renewDeadline > JitterFactor × retryPeriod
	MaxRetries     = 100
	// JitterFactor is client-go leaderelection's: a renewal attempt may
	// wait up to this times the retry period.
	JitterFactor = 1.2
	// CostlyFactor: a lock whose holders renew this many times as often as
	// the suggested settings would is flagged as costly.
	CostlyFactor = 4.0
)

// Options are the margin over the longest stall and the retries per renew
// deadline.
type Options struct {
	Margin  float64 // a share of the longest stall: 0.5 is half again
	Retries int
}

// DefaultOptions are the options the lock page uses and the API and the
// command line default to.
func DefaultOptions() Options { return Options{Margin: DefaultMargin, Retries: DefaultRetries} }

// Validate reports an option out of range, naming it.
func (o Options) Validate() error {
	if math.IsNaN(o.Margin) || o.Margin < 0 || o.Margin > MaxMargin {
		return audit.Errorf(audit.EINVALID, "margin: must be from 0 to %g (a share of the longest stall)", MaxMargin)
	}
	if o.Retries < MinRetries || o.Retries > MaxRetries {
		return audit.Errorf(audit.EINVALID, "retries: must be from %d to %d", MinRetries, MaxRetries)
	}
	return nil
}

// Renewal is one renewal of tenure Seq of a lock, at the time the collector
// saw it. A Seq of 0 (renewals stored before it was recorded) is matched to
// the tenure held at At.
type Renewal struct {
	At  time.Time
	Seq int64
}

// Window is the span of time advice is computed over.
type Window struct{ From, To time.Time }

// Sample is what Of computes from: a lock, a window, its tenures that
// overlap the window in grant order, and its renewals in time order,
// complete from RenewalsFrom (the window's start, or the oldest renewal read
// when a cap left older ones out: Capped).
type Sample struct {
	Lock         audit.Lock
	Window       Window
	Tenures      []audit.Tenure
	Renewals     []Renewal
	RenewalsFrom time.Time
	Capped       bool
}

// NewSample makes the sample of lock l over w from the tenures and the renew
// events read of it (the newest of w's, in time order); capped says the
// read stopped at its limit, so that renewals are complete only from the
// oldest one read.
func NewSample(l audit.Lock, w Window, tenures []audit.Tenure, renewals []audit.Event, capped bool) Sample {
	s := Sample{Lock: l, Window: w, Tenures: tenures, RenewalsFrom: w.From, Capped: capped}
	s.Renewals = make([]Renewal, len(renewals))
	for i, e := range renewals {
		s.Renewals[i] = Renewal{At: e.At, Seq: e.Seq}
	}
	if capped && len(renewals) > 0 {
		s.RenewalsFrom = renewals[0].At
	}
	return s
}

// lease is the lock's current lease duration: the lock's, else its newest
// tenure's; zero when unknown.
func (s Sample) lease() time.Duration {
	if s.Lock.LeaseDuration > 0 || len(s.Tenures) == 0 {
		return s.Lock.LeaseDuration
	}
	return s.Tenures[len(s.Tenures)-1].LeaseDuration
}

// Gaps are the times between one holder's writes: their count, percentiles
// (nearest rank) and the longest, which ended at MaxAt.
type Gaps struct {
	Count              int
	P50, P90, P99, Max time.Duration
	MaxAt              time.Time
}

// Settings are a lock's lease settings and the renewal writes per second a
// holder makes with them (1 / RetryPeriod). A zero duration is unknown.
type Settings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	WritesPerSecond                           float64
}

// Holder is one holder's gaps, the least lease that tolerates its longest
// stall, and whether the current lease is shorter than that stall.
type Holder struct {
	Holder string
	Gaps   Gaps
	Needed time.Duration
	Short  bool
}

// Advice is a lock's lease settings sized to its stalls.
type Advice struct {
	Lock    audit.Lock
	Window  Window
	Options Options
	// RenewalsFrom and Capped are the sample's: renewal gaps are complete
	// from RenewalsFrom; Capped says a cap left older renewals out.
	RenewalsFrom time.Time
	Capped       bool
	// Renewals is how many renewals the sample had.
	Renewals int
	Gaps     Gaps     // every holder's together
	Holders  []Holder // by holder
	// Current are the lock's lease and, for its retry period, the median
	// gap: the cadence its holders renew at. A backend does not show the
	// renew deadline.
	Current Settings
	// Suggested are the settings the rule gives; zero without gaps.
	Suggested Settings
	// Needed is the least lease that tolerates the longest stall.
	Needed time.Duration
	// Short says the current lease is shorter than the longest stall.
	Short bool
	// Cost is how many times as many writes the holders make as the
	// suggested settings would (current over suggested writes per second);
	// Costly says it is at least CostlyFactor. Zero without gaps.
	Cost   float64
	Costly bool
}

// Of computes the advice of sample s with options o, valid (Validate).
func Of(s Sample, o Options) Advice {
	a := Advice{Lock: s.Lock, Window: s.Window, Options: o, RenewalsFrom: s.RenewalsFrom, Capped: s.Capped, Renewals: len(s.Renewals)}
	lease := s.lease()
	all, byHolder := gapsOf(s)
	a.Gaps = gapsStats(all)
	for _, h := range sortedKeys(byHolder) {
		g := gapsStats(byHolder[h])
		a.Holders = append(a.Holders, Holder{Holder: h, Gaps: g, Needed: needed(g.Max, o), Short: shorter(lease, g.Max)})
	}
	a.Current = Settings{LeaseDuration: lease, RetryPeriod: a.Gaps.P50, WritesPerSecond: perSecond(a.Gaps.P50)}
	if a.Gaps.Count == 0 {
		return a
	}
	a.Needed = needed(a.Gaps.Max, o)
	a.Short = shorter(lease, a.Gaps.Max)
	a.Suggested = suggest(lease, a.Gaps.Max, o)
	if a.Suggested.WritesPerSecond > 0 {
		a.Cost = a.Current.WritesPerSecond / a.Suggested.WritesPerSecond
		a.Costly = a.Cost >= CostlyFactor
	}
	return a
}

// stalled is the longest stall with its margin, S × (1+m).
func stalled(stall time.Duration, o Options) float64 {
	return float64(stall) * (1 + o.Margin)
}

// needed is the least lease that tolerates stall: S × (1+m) × (N+1)/N,
// rounded up to a millisecond, and at least N+1 ms, so that a retry period
// of a millisecond leaves a renew deadline of N.
func needed(stall time.Duration, o Options) time.Duration {
	n := float64(o.Retries)
	return max(ceilMS(stalled(stall, o)*(n+1)/n), time.Duration(o.Retries+1)*time.Millisecond)
}

// suggest returns the settings the rule gives for the longest stall and the
// current lease (0: unknown): the current lease if it is at least the
// least needed, the longest retry period the rule allows, and the renew
// deadline between them. The retry period is rounded down to a
// millisecond, which keeps every inequality.
func suggest(lease, stall time.Duration, o Options) Settings {
	l := max(lease, needed(stall, o))
	r := min(float64(l)/float64(o.Retries+1), float64(l)-stalled(stall, o))
	retry := max(time.Duration(math.Floor(r/float64(time.Millisecond)))*time.Millisecond, time.Millisecond)
	return Settings{LeaseDuration: l, RenewDeadline: l - retry, RetryPeriod: retry, WritesPerSecond: perSecond(retry)}
}

// shorter reports whether a known lease is shorter than stall.
func shorter(lease, stall time.Duration) bool { return lease > 0 && lease < stall }

func perSecond(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(time.Second) / float64(d)
}

func ceilMS(ns float64) time.Duration {
	return time.Duration(math.Ceil(ns/float64(time.Millisecond))) * time.Millisecond
}

// gap is one holder's time between two writes, ending at end.
type gap struct {
	d   time.Duration
	end time.Time
}

// gapsStats sorts gs and returns their percentiles.
func gapsStats(gs []gap) Gaps {
	if len(gs) == 0 {
		return Gaps{}
	}
	slices.SortFunc(gs, func(a, b gap) int {
		return cmp.Or(cmp.Compare(a.d, b.d), a.end.Compare(b.end))
	})
	rank := func(q float64) time.Duration {
		return gs[int(math.Ceil(q*float64(len(gs))))-1].d
	}
	last := gs[len(gs)-1]
	return Gaps{Count: len(gs), P50: rank(0.5), P90: rank(0.9), P99: rank(0.99), Max: last.d, MaxAt: last.end}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
