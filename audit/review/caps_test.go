package review_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
)

// A zombie holder that writes to many resources after its lease expired:
// the narrative tells the first groups of late writes in full and counts the
// rest exactly, and the handover keeps every write.
func TestNarrativeCountsLateWritesBeyondItsGroups(t *testing.T) {
	l := audit.Lock{ID: 7, Source: source, Name: lock}
	prev := audit.Tenure{Seq: 1, Holder: "worker-1", Token: audit.Int64(41), GrantedAt: at("10s"),
		LastRenewedAt: at("20s"), ExpiresAt: at("30s"), EndedAt: at("30s"), End: audit.EndExpired}
	next := audit.Tenure{Seq: 2, Holder: "worker-2", Token: audit.Int64(42), GrantedAt: at("31s")}
	ld := review.LockData{Lock: l, Tenures: []audit.Tenure{prev, next}}
	// Resources r0..r6 each reject 1 + i late writes with token 41.
	total := 0
	for i := range 7 {
		for k := range 1 + i {
			w := at("31.5s").Add(time.Duration(10*i+k) * time.Millisecond)
			res := fmt.Sprintf("r%d", i)
			ld.Events = append(ld.Events, audit.Event{ID: int64(100 + total), Kind: audit.EventWriteRejected, At: w,
				Holder: "worker-1", Token: audit.Int64(41), Resource: res})
			ld.Findings = append(ld.Findings, audit.Finding{Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo,
				At: w, Resource: res, Tokens: []int64{41}})
			total++
		}
	}
	r := review.Build(window(), []review.LockData{ld}, review.Options{})
	if r.Handovers() != 1 {
		t.Fatalf("handovers = %d, want 1", r.Handovers())
	}
	h := r.Locks[0].Handovers[0]
	if len(h.Writes) != total {
		t.Errorf("handover has %d writes, want all %d", len(h.Writes), total)
	}
	for i := range 4 {
		if !strings.Contains(h.Narrative, fmt.Sprintf("rejected by the r%d: fencing held", i)) {
			t.Errorf("narrative does not tell r%d's late writes in full:\n%s", i, h.Narrative)
		}
	}
	// r4..r6 rejected 5 + 6 + 7 writes.
	if want := "18 more late writes (3 more groups by token, resource and outcome) are listed with the writes"; !strings.Contains(h.Narrative, want) {
		t.Errorf("narrative lacks %q:\n%s", want, h.Narrative)
	}
	if strings.Contains(h.Narrative, "the r4") {
		t.Errorf("narrative tells more than 4 groups in full:\n%s", h.Narrative)
	}
}

// A report that reads only the newest handovers counts those it leaves out
// exactly, also when the window starts in the middle of the lock's history.
func TestLoadCountsOmittedHandovers(t *testing.T) {
	st := incident(t)
	for _, c := range []struct {
		name      string
		from      time.Time
		max       int
		handovers int
		omitted   int
	}{
		// 41 (the lock's first tenure) → 42 → 43 → 44 → 46.
		{"WholeHistory", t0, 2, 2, 2},
		{"FromTheMiddle", at("2m2s"), 1, 1, 3},
		{"FromAGrant", at("2m4.4s"), 1, 1, 3}, // 41 → 42 is in the window
		{"NothingLeftOut", t0, 4, 4, 0},       // 41 is read, and has no predecessor
	} {
		t.Run(c.name, func(t *testing.T) {
			r := load(t, st, review.Query{Window: review.Window{From: c.from, To: at("5m")}, Locks: []string{"1"},
				Options: review.Options{MaxHandovers: c.max}})
			l := r.Locks[0]
			if len(l.Handovers) != c.handovers || l.Omitted != c.omitted {
				t.Fatalf("handovers = %d, omitted %d; want %d and %d", len(l.Handovers), l.Omitted, c.handovers, c.omitted)
			}
		})
	}
	t.Run("ShareOfATotal", func(t *testing.T) {
		// One lock's share of a total below the floor is the floor.
		r := load(t, st, review.Query{Window: window(), Locks: []string{"1"}, Options: review.Options{MaxHandoversTotal: 1}})
		want := min(4, review.MinHandoversPerLock)
		if l := r.Locks[0]; len(l.Handovers) != want || l.Omitted != 4-want {
			t.Fatalf("handovers = %d, omitted %d; want %d (a lock's share is at least %d) and %d", len(l.Handovers), l.Omitted,
				want, review.MinHandoversPerLock, 4-want)
		}
		// A share above the lock's handovers leaves nothing out.
		r = load(t, st, review.Query{Window: window(), Locks: []string{"1"}, Options: review.Options{MaxHandoversTotal: 50}})
		if l := r.Locks[0]; len(l.Handovers) != 4 || l.Omitted != 0 {
			t.Fatalf("handovers = %d, omitted %d; want all 4", len(l.Handovers), l.Omitted)
		}
	})
}

// zombieWrites returns the data of one handover (token 41 expires at 30s,
// token 42 is granted at 31s) and n writes around it, in a scrambled order:
// every seventh is a late write with token 41 that the ledger rejected
// (stale), every eleventh one with token 41 the cache accepted (unfenced),
// the rest the new holder's.
func zombieWrites(n int) review.LockData {
	l := audit.Lock{ID: 7, Source: source, Name: lock}
	prev := audit.Tenure{Seq: 1, Holder: "worker-1", Token: audit.Int64(41), GrantedAt: at("10s"),
		LastRenewedAt: at("20s"), ExpiresAt: at("30s"), EndedAt: at("30s"), End: audit.EndExpired}
	next := audit.Tenure{Seq: 2, Holder: "worker-2", Token: audit.Int64(42), GrantedAt: at("31s")}
	ld := review.LockData{Lock: l, Tenures: []audit.Tenure{prev, next}}
	for i := range n {
		j := (i * 7919) % n // a permutation when n is not a multiple of 7919
		e := audit.Event{ID: int64(1000 + j), Kind: audit.EventWriteAccepted, At: at("31.1s").Add(time.Duration(j) * time.Millisecond),
			Holder: "worker-2", Token: audit.Int64(42), Resource: "ledger"}
		switch {
		case j%7 == 0:
			e.Kind, e.Holder, e.Token = audit.EventWriteRejected, "worker-1", audit.Int64(41)
			ld.Findings = append(ld.Findings, audit.Finding{Kind: audit.FindingStaleWrite, At: e.At, Resource: "ledger", Tokens: []int64{41}})
		case j%11 == 0:
			e.Holder, e.Token, e.Resource = "worker-1", audit.Int64(41), "cache"
			ld.Findings = append(ld.Findings, audit.Finding{Kind: audit.FindingUnfencedWrite, At: e.At, Resource: "cache", Tokens: []int64{41}})
		}
		ld.Events = append(ld.Events, e)
	}
	return ld
}

// A handover with more writes than a report lists: it lists the stale and
// unfenced writes first and then the earliest, in time order, counts every
// write, and its narrative still tells every late write, whatever order
// the writes come in.
func TestMaxWritesListsFlaggedFirstAndCountsAll(t *testing.T) {
	const n = 200 // 29 stale (j%7 == 0), 16 unfenced (j%11 == 0, not j%7)
	ld := zombieWrites(n)
	all := review.Build(window(), []review.LockData{ld}, review.Options{}).Locks[0].Handovers[0]
	if len(all.Writes) != n {
		t.Fatalf("without a cap: %d writes listed, want all %d", len(all.Writes), n)
	}
	want := review.WriteCount{Total: n, Accepted: n - 29, Rejected: 29, Stale: 29, Unfenced: 16}
	if all.WriteCount != want {
		t.Fatalf("counts = %+v, want %+v", all.WriteCount, want)
	}
	for _, late := range []string{"29 writes with token 41 arrived 1.1 s to 1.3 s after the expiry and were rejected by the ledger",
		"16 writes with token 41 arrived 1.1 s to 1.3 s after the expiry and were accepted by the cache"} {
		if !strings.Contains(all.Narrative, late) {
			t.Errorf("narrative lacks %q:\n%s", late, all.Narrative)
		}
	}

	for _, c := range []struct {
		max, flagged, plain int
	}{{10, 10, 0}, {50, 45, 5}, {n, 45, n - 45}} {
		h := review.Build(window(), []review.LockData{ld}, review.Options{MaxWrites: c.max}).Locks[0].Handovers[0]
		if h.WriteCount != want {
			t.Errorf("max %d: counts = %+v, want %+v", c.max, h.WriteCount, want)
		}
		if h.Narrative != all.Narrative {
			t.Errorf("max %d: narrative differs from the uncapped one:\n%s\nwant\n%s", c.max, h.Narrative, all.Narrative)
		}
		var flagged, plain []review.Write
		for i, w := range h.Writes {
			if i > 0 && w.At.Before(h.Writes[i-1].At) {
				t.Errorf("max %d: write %d at %v is listed before %v", c.max, i, w.At, h.Writes[i-1].At)
			}
			if w.Verdict != review.VerdictNone {
				flagged = append(flagged, w)
			} else {
				plain = append(plain, w)
			}
		}
		if len(flagged) != c.flagged || len(plain) != c.plain {
			t.Fatalf("max %d: listed %d flagged and %d other writes, want %d and %d", c.max, len(flagged), len(plain), c.flagged, c.plain)
		}
		// The earliest of each.
		var wantFlagged, wantPlain []review.Write
		for _, w := range all.Writes {
			if w.Verdict != review.VerdictNone && len(wantFlagged) < c.flagged {
				wantFlagged = append(wantFlagged, w)
			}
			if w.Verdict == review.VerdictNone && len(wantPlain) < c.plain {
				wantPlain = append(wantPlain, w)
			}
		}
		for i := range flagged {
			if !flagged[i].At.Equal(wantFlagged[i].At) {
				t.Errorf("max %d: flagged write %d at %v, want the earliest at %v", c.max, i, flagged[i].At, wantFlagged[i].At)
			}
		}
		for i := range plain {
			if !plain[i].At.Equal(wantPlain[i].At) {
				t.Errorf("max %d: write %d at %v, want the earliest at %v", c.max, i, plain[i].At, wantPlain[i].At)
			}
		}
	}
}

// A lock whose resources wrote more than a report reads at a time: Load
// pages through the writes and their findings and gives the same handover
// as Build given all of them at once.
func TestLoadPagesThroughManyWrites(t *testing.T) {
	ctx := context.Background()
	st, rec := recorder(t)
	defer rec.Close()
	observe := observer(t, rec)
	observe(audit.EventGrant, "10s", "worker-1", 41)
	observe(audit.EventExpire, "30s", "worker-1", 41)
	observe(audit.EventGrant, "31s", "worker-2", 42)
	const n = 4500 // more than two pages
	var batch []audit.WriteReport
	for _, e := range zombieWrites(n).Events {
		outcome := audit.WriteAccepted
		if e.Kind == audit.EventWriteRejected {
			outcome = audit.WriteRejected
		}
		batch = append(batch, audit.WriteReport{Source: source, Lock: lock, Resource: e.Resource, Holder: e.Holder,
			Token: e.Token, Outcome: outcome, At: e.At})
		if len(batch) == 500 {
			if err := rec.ReportWrites(ctx, batch); err != nil {
				t.Fatalf("report writes: %v", err)
			}
			batch = nil
		}
	}
	if err := rec.ReportWrites(ctx, batch); err != nil {
		t.Fatalf("report writes: %v", err)
	}

	l, err := st.LockByKey(ctx, ordersKey)
	if err != nil {
		t.Fatal(err)
	}
	ld := review.LockData{Lock: l}
	if ld.Tenures, err = st.Tenures(ctx, l.ID, audit.TimeFilter{}); err != nil {
		t.Fatal(err)
	}
	if ld.Events, err = st.Events(ctx, l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 2 * n}}); err != nil {
		t.Fatal(err)
	}
	if ld.Findings, err = st.Findings(ctx, audit.FindingFilter{LockID: l.ID, TimeFilter: audit.TimeFilter{Limit: 2 * n}}); err != nil {
		t.Fatal(err)
	}
	opts := review.Options{MaxWrites: 12}
	want := review.Build(window(), []review.LockData{ld}, opts).Locks[0].Handovers[0]
	if want.WriteCount.Total != n || want.WriteCount.Stale == 0 || want.WriteCount.Unfenced == 0 {
		t.Fatalf("built from all the data: counts %+v, want %d writes, some stale and some unfenced", want.WriteCount, n)
	}
	r := load(t, st, review.Query{Window: window(), Locks: []string{"1"}, Options: opts})
	if len(r.Notes) > 0 {
		t.Errorf("notes: %q", r.Notes)
	}
	got := r.Locks[0].Handovers[0]
	if got.WriteCount != want.WriteCount {
		t.Errorf("loaded counts %+v, want %+v", got.WriteCount, want.WriteCount)
	}
	if !slices.EqualFunc(got.Writes, want.Writes, sameWrite) {
		t.Errorf("loaded writes\n%+v\nwant\n%+v", got.Writes, want.Writes)
	}
	if got.Narrative != want.Narrative {
		t.Errorf("loaded narrative\n%s\nwant\n%s", got.Narrative, want.Narrative)
	}
}

func sameWrite(a, b review.Write) bool {
	return a.At.Equal(b.At) && a.Resource == b.Resource && a.Holder == b.Holder && a.Outcome == b.Outcome &&
		a.Verdict == b.Verdict && reflect.DeepEqual(a.Token, b.Token) && reflect.DeepEqual(a.HighestToken, b.HighestToken)
}
