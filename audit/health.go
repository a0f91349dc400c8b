package audit

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Leadership health: findings about how a lock is held rather than about
// fencing. A lock whose leadership moves too often (flapping), a lock that is
// normally held and has been left without a holder (leaderless), a holder
// that renews with too little of its lease to spare (tight_renewal), and a
// holder whose clock runs ahead of the collector's (clock_skew). Each is
// reported once per occurrence: flapping at most once per FlappingRepeat,
// leaderless once per free spell, the other two once per tenure.

// HealthConfig tunes the leadership health findings (config health:). Zero
// fields take the Default* values.
type HealthConfig struct {
	// FlappingPerHour: a lock granted more than this many times within an
	// hour is flapping. At most MaxFlappingPerHour.
	FlappingPerHour int
	// LeaderlessAfter: how long a lock that is normally held may stay free
	// or expired before it is leaderless.
	LeaderlessAfter time.Duration
	// TightMarginRatio: a holder whose typical renewal leaves less than
	// this fraction of its lease renews too tightly.
	TightMarginRatio float64
	// ClockSkewRatio: a holder whose clock runs ahead of the collector's by
	// more than this fraction of its lease is skewed.
	ClockSkewRatio float64
	// Clocks keeps each holder's clock estimate, which clock_skew is
	// judged by (clocks.go), for readers to share. Nil: one of the
	// tracker's own.
	Clocks *HolderClocks
}

// Health defaults.
const (
	DefaultFlappingPerHour  = 6
	DefaultLeaderlessAfter  = time.Minute
	DefaultTightMarginRatio = 0.4
	DefaultClockSkewRatio   = 0.1
	// MaxFlappingPerHour bounds FlappingPerHour: the tracker keeps one more
	// tenure per lock than it, to count them.
	MaxFlappingPerHour = 100
)

const (
	// FlappingRepeat is how long after a flapping finding the next one on
	// the same lock waits: half the hour it counts over, so a lock that
	// goes on flapping keeps its alert firing (alert.FlappingHold).
	FlappingRepeat = 30 * time.Minute
	// normallyHeldShare is the share of its known history a lock must have
	// been held for to be normally held, over at least leaderlessHistory
	// times LeaderlessAfter: a job lock taken now and then is free most of
	// the time, and only a lock that is nearly always held has a leader to
	// miss.
	normallyHeldShare = 0.9
	leaderlessHistory = 10
	// tightSamples is how many renewal intervals a tenure must show before
	// its typical interval is judged.
	tightSamples = 3
)

func (c HealthConfig) withDefaults() HealthConfig {
	if c.FlappingPerHour <= 0 {
		c.FlappingPerHour = DefaultFlappingPerHour
	}
	c.FlappingPerHour = min(c.FlappingPerHour, MaxFlappingPerHour)
	if c.LeaderlessAfter <= 0 {
		c.LeaderlessAfter = DefaultLeaderlessAfter
	}
	if c.TightMarginRatio <= 0 {
		c.TightMarginRatio = DefaultTightMarginRatio
	}
	if c.ClockSkewRatio <= 0 {
		c.ClockSkewRatio = DefaultClockSkewRatio
	}
	if c.Clocks == nil {
		c.Clocks = NewHolderClocks(0)
	}
	return c
}

// flapping raises a flapping finding when the grant just made (the newest
// tenure) is one more than FlappingPerHour within the hour up to it.
func (t *Tracker) flapping(o *output, st *lockState) {
	if st.class() == ClassHeartbeat || len(st.recent) <= t.cfg.Health.FlappingPerHour {
		return
	}
	newest := &st.recent[len(st.recent)-1]
	if last := st.reportedOf().flappingAt; last != 0 && newest.granted-last < int64(FlappingRepeat) {
		return
	}
	from := newest.granted - int64(time.Hour)
	var grants int
	var names []string
	for i := len(st.recent) - 1; i >= 0 && st.recent[i].granted >= from; i-- {
		ten := &st.recent[i]
		if ten.observed {
			break // first seen, not granted: the collector does not know what came before
		}
		grants++
		if len(names) < 8 {
			names = append(names, ten.holder)
		}
	}
	if grants <= t.cfg.Health.FlappingPerHour {
		return
	}
	st.health().flappingAt = newest.granted
	o.changed(st)
	hs := holders(names...)
	o.finding(st, Finding{Kind: FindingFlapping, At: newest.grantedAt(), Holders: hs,
		Summary: fmt.Sprintf("granted %d times within the hour up to this grant, more than the %d an hour that make leadership flap: held in turn by %s",
			grants, t.cfg.Health.FlappingPerHour, listed(hs))})
}

// listed is names for a summary.
func listed(names []string) string {
	if len(names) == 0 {
		return "unknown holders"
	}
	return strings.Join(names, ", ")
}

// markLeaderless notes, as the newest tenure of st ends, when the lock
// becomes leaderless if nobody takes it: only a lock-class lock that was
// held for nearly all of its known history has a leader to miss.
func (t *Tracker) markLeaderless(st *lockState) {
	st.leaderlessDue = 0
	n := len(st.recent)
	if n == 0 || st.class() == ClassHeartbeat {
		return
	}
	last := &st.recent[n-1]
	span := last.ended - st.recent[0].granted
	if span < leaderlessHistory*int64(t.cfg.Health.LeaderlessAfter) {
		return
	}
	var held int64
	for i := range st.recent {
		held += st.recent[i].ended - st.recent[i].granted
	}
	if float64(held) < normallyHeldShare*float64(span) {
		return
	}
	st.leaderlessDue = last.ended + int64(t.cfg.Health.LeaderlessAfter)
}

// leaderless raises the leaderless finding of a lock whose leader has been
// missing since its due time (markLeaderless).
func (t *Tracker) leaderless(o *output, st *lockState) {
	st.leaderlessDue = 0
	o.changed(st)
	last := &st.recent[len(st.recent)-1]
	o.finding(st, Finding{Kind: FindingLeaderless, At: last.endedAt(), Tokens: tokens(last.token), Holders: holders(last.holder),
		Summary: fmt.Sprintf("nobody has held the lock since %s %s at %s, for longer than the %s a lock that is normally held may go without a holder",
			orUnknown(last.holder), endedHow(last.end.reason()), last.endedAt().UTC().Format(time.RFC3339), t.cfg.Health.LeaderlessAfter)})
}

func endedHow(r EndReason) string {
	if r == EndExpired {
		return "let its lease expire"
	}
	return "released it"
}

// timeRenewal folds the interval since cur's previous renewal, made at
// previous, into its typical interval, and raises tight_renewal once per
// tenure when that leaves less than TightMarginRatio of the lease.
func (t *Tracker) timeRenewal(o *output, st *lockState, cur *tenure, previous, at time.Time) {
	gap := at.Sub(previous)
	if gap <= 0 || gap > cur.lease || gap > math.MaxInt32*time.Millisecond {
		// Longer than the lease: renewals the collector did not see (a
		// restart, a missed poll), or a late one, which late_renewal tells.
		return
	}
	ms := int32(gap.Milliseconds())
	if cur.samples == 0 {
		cur.gapMS = ms
	} else {
		cur.gapMS += (ms - cur.gapMS) / 4 // an average that forgets: a holder may be reconfigured
	}
	if cur.samples < tightSamples {
		cur.samples++
		return
	}
	if st.reportedOf().tightSeq == cur.seq {
		return
	}
	typical := time.Duration(cur.gapMS) * time.Millisecond
	margin := 1 - float64(typical)/float64(cur.lease)
	if margin >= t.cfg.Health.TightMarginRatio {
		return
	}
	st.health().tightSeq = cur.seq
	o.changed(st)
	o.finding(st, Finding{Kind: FindingTightRenewal, At: at, Tokens: tokens(cur.token), Holders: holders(cur.holder),
		Summary: fmt.Sprintf("%s renews about every %s on a %s lease, leaving %.0f%% of it to spare, less than %.0f%%: one slow renewal and the lease runs out; renew well within the lease",
			orUnknown(cur.holder), typical, cur.lease, 100*max(margin, 0), 100*t.cfg.Health.TightMarginRatio)})
}

// clockSkew adds ob, from a backend that records the holder's own clock
// (Input.HolderClock), to its holder's clock estimate (HolderClocks), and
// raises clock_skew once per tenure when the estimate shows the holder's
// clock ahead of the collector's by more than ClockSkewRatio of the lease
// and by more than its bound (ClockEstimate.Beyond). Only a clock ahead is
// told apart: one behind looks the same as a change delivered late.
func (t *Tracker) clockSkew(o *output, st *lockState, ob Observation) {
	if ob.RenewedAt.IsZero() || ob.Holder == "" {
		return
	}
	est := t.cfg.Health.Clocks.Observe(HolderKey{Source: st.key.Source, Holder: ob.Holder}, st.class(), ob.At, ob.RenewedAt)
	cur := st.current()
	if cur == nil || cur.lease <= 0 || st.reportedOf().skewSeq == cur.seq || cur.holder != ob.Holder {
		return
	}
	if !est.Beyond(time.Duration(t.cfg.Health.ClockSkewRatio * float64(cur.lease))) {
		return
	}
	st.health().skewSeq = cur.seq
	o.changed(st)
	o.finding(st, Finding{Kind: FindingClockSkew, At: ob.At, Tokens: tokens(cur.token), Holders: holders(cur.holder),
		Summary: fmt.Sprintf("%s's clock runs at least %s ahead of the collector's (%s; this renewal written at %s, seen at %s), %.0f%% of its %s lease: whatever judges the lease by that time thinks it runs longer than it does",
			orUnknown(cur.holder), est.Offset.Round(time.Millisecond), est, ob.RenewedAt.UTC().Format(time.RFC3339Nano), ob.At.UTC().Format(time.RFC3339Nano), 100*float64(est.Offset)/float64(cur.lease), cur.lease)})
}
