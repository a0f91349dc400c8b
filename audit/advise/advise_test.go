package advise_test

import (
	"math"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/advise"
)

var t0 = time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// renewals renews tenure seq at each of ms.
func renewals(seq int64, ms ...int) []advise.Renewal {
	var rs []advise.Renewal
	for _, m := range ms {
		rs = append(rs, advise.Renewal{At: at(m), Seq: seq})
	}
	return rs
}

func sample(lease time.Duration, tenures []audit.Tenure, rs ...[]advise.Renewal) advise.Sample {
	s := advise.Sample{Lock: audit.Lock{ID: 1, LeaseDuration: lease}, Window: advise.Window{From: t0, To: at(3_600_000)},
		Tenures: tenures, RenewalsFrom: t0}
	for _, r := range rs {
		s.Renewals = append(s.Renewals, r...)
	}
	return s
}

// fitsClientGo checks client-go's leaderelection constraint, LeaseDuration
// > RenewDeadline > JitterFactor × RetryPeriod, and the rule's.
func fitsClientGo(t *testing.T, a advise.Advice) {
	t.Helper()
	s, o := a.Suggested, a.Options
	if !(s.LeaseDuration > s.RenewDeadline && float64(s.RenewDeadline) > advise.JitterFactor*float64(s.RetryPeriod) && s.RetryPeriod > 0) {
		t.Errorf("suggested %+v breaks LeaseDuration > RenewDeadline > %.1f × RetryPeriod", s, advise.JitterFactor)
	}
	stalled := float64(a.Gaps.Max) * (1 + o.Margin)
	if float64(s.LeaseDuration) < stalled+float64(s.RetryPeriod) || float64(s.RenewDeadline) < stalled || s.RenewDeadline < time.Duration(o.Retries)*s.RetryPeriod {
		t.Errorf("suggested %+v breaks the rule for the longest stall %v, margin %v, %d retries", s, a.Gaps.Max, o.Margin, o.Retries)
	}
}

func gapsAre(t *testing.T, name string, got, want advise.Gaps) {
	t.Helper()
	if got != want {
		t.Errorf("%s gaps = %+v, want %+v", name, got, want)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestNoRenewals(t *testing.T) {
	a := advise.Of(sample(15*time.Second, []audit.Tenure{{Seq: 1, Holder: "a", GrantedAt: at(0)}}), advise.DefaultOptions())
	gapsAre(t, "lock", a.Gaps, advise.Gaps{})
	if a.Suggested != (advise.Settings{}) || a.Needed != 0 || a.Short || a.Costly || a.Cost != 0 || len(a.Holders) != 0 {
		t.Errorf("advice = %+v, want no suggestion without a gap", a)
	}
	if a.Current != (advise.Settings{LeaseDuration: 15 * time.Second}) {
		t.Errorf("current = %+v, want the lease alone", a.Current)
	}
}

// One renewal 2 s after its grant under a 15 s lease: client-go's cadence.
// The lease is kept (it tolerates the 2 s gap: 3.6 s would do), and the
// longest retry period the rule allows is 15 s / 6.
func TestOneRenewal(t *testing.T) {
	a := advise.Of(sample(15*time.Second, []audit.Tenure{{Seq: 1, Holder: "a", GrantedAt: at(0)}}, renewals(1, 2000)), advise.DefaultOptions())
	gapsAre(t, "lock", a.Gaps, advise.Gaps{Count: 1, P50: sec(2), P90: sec(2), P99: sec(2), Max: sec(2), MaxAt: at(2000)})
	if a.Needed != sec(3.6) {
		t.Errorf("needed = %v, want 3.6s (2s × 1.5 × 6/5)", a.Needed)
	}
	want := advise.Settings{LeaseDuration: sec(15), RenewDeadline: sec(12.5), RetryPeriod: sec(2.5), WritesPerSecond: 0.4}
	if a.Suggested != want {
		t.Errorf("suggested = %+v, want %+v", a.Suggested, want)
	}
	if a.Current.RetryPeriod != sec(2) || a.Current.WritesPerSecond != 0.5 || !near(a.Cost, 1.25) || a.Costly || a.Short {
		t.Errorf("current %+v, cost %v costly %v short %v; want 2s, 0.5/s, cost 1.25, neither flag", a.Current, a.Cost, a.Costly, a.Short)
	}
	fitsClientGo(t, a)
}

// Two holders of a 60 s lease renewing every second or faster: the lease
// tolerates b's 2.5 s stall many times over, and 10 s retries would do, a
// tenth of the writes.
func TestSeveralHolders(t *testing.T) {
	tenures := []audit.Tenure{
		{Seq: 1, Holder: "a", GrantedAt: at(0), EndedAt: at(5000), End: audit.EndReleased},
		{Seq: 2, Holder: "b", GrantedAt: at(10_000)},
	}
	a := advise.Of(sample(time.Minute, tenures, renewals(1, 1000, 2000, 3000, 4000), renewals(2, 10_500, 11_000, 11_500, 14_000)), advise.DefaultOptions())
	// Gaps 0.5 0.5 0.5 1 1 1 1 2.5: the 4th, 8th and 8th by rank.
	gapsAre(t, "lock", a.Gaps, advise.Gaps{Count: 8, P50: sec(1), P90: sec(2.5), P99: sec(2.5), Max: sec(2.5), MaxAt: at(14_000)})
	if len(a.Holders) != 2 {
		t.Fatalf("holders = %+v, want a and b", a.Holders)
	}
	gapsAre(t, "a", a.Holders[0].Gaps, advise.Gaps{Count: 4, P50: sec(1), P90: sec(1), P99: sec(1), Max: sec(1), MaxAt: at(4000)})
	gapsAre(t, "b", a.Holders[1].Gaps, advise.Gaps{Count: 4, P50: sec(0.5), P90: sec(2.5), P99: sec(2.5), Max: sec(2.5), MaxAt: at(14_000)})
	if a.Holders[0].Holder != "a" || a.Holders[0].Needed != sec(1.8) || a.Holders[1].Needed != sec(4.5) || a.Holders[1].Short {
		t.Errorf("holders = %+v, want a needing 1.8s, b 4.5s, neither short", a.Holders)
	}
	want := advise.Settings{LeaseDuration: time.Minute, RenewDeadline: sec(50), RetryPeriod: sec(10), WritesPerSecond: 0.1}
	if a.Suggested != want || a.Needed != sec(4.5) {
		t.Errorf("suggested = %+v, needed %v; want %+v, 4.5s", a.Suggested, a.Needed, want)
	}
	if !near(a.Cost, 10) || !a.Costly || a.Short {
		t.Errorf("cost = %v, costly %v, short %v; want 10 times the writes, costly, not short", a.Cost, a.Costly, a.Short)
	}
	fitsClientGo(t, a)
}

// A holder of a 5 s lease stalls 20 s: its lease expires, and it takes the
// lock again when it wakes. Another stalls 8 s within its tenure, renewing
// after its lease ran out with nothing to expire it meanwhile. The lease is
// shorter than both stalls; 36 s would have tolerated them.
func TestStallLongerThanTheLease(t *testing.T) {
	tenures := []audit.Tenure{
		{Seq: 1, Holder: "a", GrantedAt: at(0), LastRenewedAt: at(2000), EndedAt: at(7000), End: audit.EndExpired},
		{Seq: 2, Holder: "a", GrantedAt: at(22_000), EndedAt: at(24_000), End: audit.EndReleased},
		{Seq: 3, Holder: "b", GrantedAt: at(30_000)},
	}
	a := advise.Of(sample(5*time.Second, tenures, renewals(1, 1000, 2000), renewals(2, 23_000), renewals(3, 31_000, 39_000)), advise.DefaultOptions())
	// a: 1 1 20 (its expiry to its grant again) 1; b: 1 8.
	gapsAre(t, "lock", a.Gaps, advise.Gaps{Count: 6, P50: sec(1), P90: sec(20), P99: sec(20), Max: sec(20), MaxAt: at(22_000)})
	gapsAre(t, "b", a.Holders[1].Gaps, advise.Gaps{Count: 2, P50: sec(1), P90: sec(8), P99: sec(8), Max: sec(8), MaxAt: at(39_000)})
	if !a.Short || !a.Holders[0].Short || !a.Holders[1].Short {
		t.Errorf("short = %v (a %v, b %v), want a 5s lease flagged shorter than both stalls", a.Short, a.Holders[0].Short, a.Holders[1].Short)
	}
	want := advise.Settings{LeaseDuration: sec(36), RenewDeadline: sec(30), RetryPeriod: sec(6), WritesPerSecond: 1.0 / 6}
	if a.Suggested != want || a.Needed != sec(36) {
		t.Errorf("suggested = %+v, needed %v; want %+v, 36s", a.Suggested, a.Needed, want)
	}
	fitsClientGo(t, a)
}

// What is not a gap: the time before the first renewal of a tenure first
// seen already held, or granted before the renewals are complete; a
// release followed by the same holder; and the time since a held tenure's
// last renewal. A renewal without a tenure seq goes to the tenure held then.
func TestWhatIsNotAGap(t *testing.T) {
	tenures := []audit.Tenure{
		{Seq: 1, Holder: "a", Observed: true, GrantedAt: at(0), LastRenewedAt: at(5000), EndedAt: at(6000), End: audit.EndReleased},
		{Seq: 2, Holder: "a", GrantedAt: at(60_000), LastRenewedAt: at(61_000), EndedAt: at(90_000), End: audit.EndExpired},
		{Seq: 3, Holder: "b", GrantedAt: at(100_000)},
	}
	s := sample(15*time.Second, tenures, renewals(1, 3000, 5000), renewals(0, 61_000), renewals(3, 101_000))
	a := advise.Of(s, advise.DefaultOptions())
	// a: 3→5 s, its second grant at 60 s → 61 s; b: 100 → 101 s.
	gapsAre(t, "lock", a.Gaps, advise.Gaps{Count: 3, P50: sec(1), P90: sec(2), P99: sec(2), Max: sec(2), MaxAt: at(5000)})

	// Renewals read capped from 61 s on: the grant at 60 s ends no gap.
	s.Renewals, s.RenewalsFrom, s.Capped = s.Renewals[2:], at(61_000), true
	a = advise.Of(s, advise.DefaultOptions())
	gapsAre(t, "capped", a.Gaps, advise.Gaps{Count: 1, P50: sec(1), P90: sec(1), P99: sec(1), Max: sec(1), MaxAt: at(101_000)})
	if !a.Capped || !a.RenewalsFrom.Equal(at(61_000)) || a.Renewals != 2 {
		t.Errorf("advice from %v capped %v of %d renewals, want from 61s, capped, 2", a.RenewalsFrom, a.Capped, a.Renewals)
	}
}

// Two renewals in the same millisecond under a lease the backend did not
// tell still get settings client-go takes.
func TestInstantGapUnknownLease(t *testing.T) {
	tenures := []audit.Tenure{{Seq: 1, Holder: "a", Observed: true, GrantedAt: at(0)}}
	a := advise.Of(sample(0, tenures, renewals(1, 1000, 1000)), advise.DefaultOptions())
	want := advise.Settings{LeaseDuration: 6 * time.Millisecond, RenewDeadline: 5 * time.Millisecond, RetryPeriod: time.Millisecond, WritesPerSecond: 1000}
	if a.Suggested != want || a.Short {
		t.Errorf("suggested = %+v, short %v; want %+v, not short", a.Suggested, a.Short, want)
	}
	fitsClientGo(t, a)
}

func TestNewSampleCapped(t *testing.T) {
	events := []audit.Event{{Kind: audit.EventRenew, At: at(4000), Seq: 2}, {Kind: audit.EventRenew, At: at(5000), Seq: 2}}
	w := advise.Window{From: t0, To: at(10_000)}
	if s := advise.NewSample(audit.Lock{}, w, nil, events, true); !s.RenewalsFrom.Equal(at(4000)) || len(s.Renewals) != 2 || s.Renewals[1] != (advise.Renewal{At: at(5000), Seq: 2}) {
		t.Errorf("capped sample = %+v, want renewals complete from the oldest read", s)
	}
	if s := advise.NewSample(audit.Lock{}, w, nil, events, false); !s.RenewalsFrom.Equal(t0) {
		t.Errorf("sample from %v, want the window's start", s.RenewalsFrom)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tt := range []struct {
		o    advise.Options
		want string
	}{
		{advise.DefaultOptions(), ""},
		{advise.Options{Margin: 0, Retries: 2}, ""},
		{advise.Options{Margin: -0.1, Retries: 5}, "margin: must be from 0 to 10 (a share of the longest stall)"},
		{advise.Options{Margin: math.NaN(), Retries: 5}, "margin: must be from 0 to 10 (a share of the longest stall)"},
		{advise.Options{Margin: 0.5, Retries: 1}, "retries: must be from 2 to 100"},
		{advise.Options{Margin: 0.5, Retries: 101}, "retries: must be from 2 to 100"},
	} {
		err := tt.o.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (audit.ErrorMessage(err) != tt.want || audit.ErrorCode(err) != audit.EINVALID) {
			t.Errorf("%+v: %v, want %q (invalid)", tt.o, err, tt.want)
		}
	}
}
