package present

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// The scale in these tests is one unit per second: the plot is 1016 units
// wide (170 to 1186), so the window is 1016 seconds long.
var (
	tlT    = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	tlFrom = tlT
	tlTo   = tlT.Add(1016 * time.Second)
)

func sec(n int) time.Time { return tlT.Add(time.Duration(n) * time.Second) }

// xAt is where second n of the window lands.
func xAt(n float64) float64 { return tlGutter + n }

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 0.01 {
		t.Errorf("%s = %.2f, want %.2f", what, got, want)
	}
}

func laneTop(i int) float64 { return tlTopPad + float64(i)*tlLaneH + tlBarTop }

func baseInput() timelineInput {
	return timelineInput{
		Lock: "prod-etcd//locks/orders", From: tlFrom, To: tlTo, Now: sec(900), Loc: time.UTC,
		Tenures: []audit.Tenure{
			{Seq: 1, Holder: "alice", Token: audit.Int64(41), GrantedAt: sec(100), Renewals: 2, LastRenewedAt: sec(290),
				LeaseDuration: 10 * time.Second, ExpiresAt: sec(300), EndedAt: sec(300), End: audit.EndReleased},
			{Seq: 2, Holder: "bob", Token: audit.Int64(42), GrantedAt: sec(300), Renewals: 3, LastRenewedAt: sec(330),
				LeaseDuration: 10 * time.Second, ExpiresAt: sec(910)},
		},
		Renewals: []time.Time{sec(150), sec(290), sec(310), sec(320), sec(330)},
		Zoom: func(from, to time.Time) string {
			return "/locks/1?from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339)
		},
		FindingHref: func(f audit.Finding) string { return fmt.Sprintf("#finding-%d", f.ID) },
	}
}

func TestTimelineBars(t *testing.T) {
	tl := buildTimeline(baseInput())
	if len(tl.Lanes) != 2 || tl.Lanes[0].Label != "alice" || tl.Lanes[1].Label != "bob" {
		t.Fatalf("lanes = %+v, want alice then bob", tl.Lanes)
	}
	if len(tl.Bars) != 2 {
		t.Fatalf("bars = %d, want 2", len(tl.Bars))
	}
	a, b := tl.Bars[0], tl.Bars[1]

	t.Run("ReleasedTenure", func(t *testing.T) {
		near(t, "x", a.X, xAt(100))
		near(t, "width", a.W, 200)
		near(t, "y", a.Y, laneTop(0))
		if a.End != "released" || a.Held || a.Label != "41" {
			t.Errorf("bar = %+v, want a released, labelled 41", a)
		}
		near(t, "end x", a.EndX, xAt(300))
		for _, want := range []string{"alice · token 41", "granted 2025-03-01 10:01:40.000Z", "released 2025-03-01 10:05:00.000Z", "2 renewals"} {
			if !strings.Contains(a.Title, want) {
				t.Errorf("title %q lacks %q", a.Title, want)
			}
		}
		if !strings.Contains(a.Href, "from=2025-03-01T10:01:20Z") || !strings.Contains(a.Href, "to=2025-03-01T10:05:20Z") {
			t.Errorf("zoom href = %q, want the tenure padded by a tenth either side", a.Href)
		}
	})
	t.Run("HeldTenureRunsToNowWithLeaseTail", func(t *testing.T) {
		near(t, "x", b.X, xAt(300))
		near(t, "width", b.W, 600)
		near(t, "y", b.Y, laneTop(1))
		near(t, "tail x", b.TailX, xAt(900))
		near(t, "tail width", b.TailW, 10)
		if !b.Held || b.End != "" || !strings.Contains(b.Title, "still held") {
			t.Errorf("bar = %+v, want held without an end marker", b)
		}
	})
	t.Run("SparseRenewalsAreTicks", func(t *testing.T) {
		if len(a.Ticks) != 2 || len(b.Ticks) != 3 || a.BandW != 0 || b.BandW != 0 {
			t.Fatalf("ticks %v and %v, bands %v %v: want 2 and 3 ticks, no band", a.Ticks, b.Ticks, a.BandW, b.BandW)
		}
		near(t, "first tick of bob", b.Ticks[0], xAt(310))
		near(t, "last tick of bob", b.Ticks[2], xAt(330))
	})
	t.Run("NowLine", func(t *testing.T) {
		if !tl.HasNow {
			t.Fatal("no now line")
		}
		near(t, "now x", tl.NowX, xAt(900))
	})
}

func TestTimelineExpiredTenureShowsTheLeaseRunningOut(t *testing.T) {
	in := baseInput()
	in.Tenures = []audit.Tenure{{Seq: 1, Holder: "carol", Token: audit.Int64(7), GrantedAt: sec(100), Renewals: 1,
		LastRenewedAt: sec(200), LeaseDuration: 10 * time.Second, ExpiresAt: sec(210), EndedAt: sec(210), End: audit.EndExpired}}
	in.Renewals = []time.Time{sec(200)}
	b := buildTimeline(in).Bars[0]
	near(t, "solid part", b.W, 100)
	near(t, "tail x", b.TailX, xAt(200))
	near(t, "tail width", b.TailW, 10)
	if b.End != "expired" {
		t.Errorf("end = %q, want expired", b.End)
	}
	near(t, "end x", b.EndX, xAt(210))
	if len(b.Ticks) != 1 {
		t.Fatalf("ticks = %v, want the one renewal", b.Ticks)
	}
	near(t, "renewal tick", b.Ticks[0], xAt(200))

	// Renewals counted on the tenure whose times were not loaded: a band,
	// never nothing.
	in.Renewals, in.RenewalsFrom = nil, sec(500)
	if b := buildTimeline(in).Bars[0]; b.BandW == 0 {
		t.Errorf("a tenure with renewals and no known times draws no band")
	}
}

func TestTimelineClipsToTheWindow(t *testing.T) {
	in := baseInput()
	in.Tenures = []audit.Tenure{
		{Seq: 1, Holder: "old", GrantedAt: sec(-500), EndedAt: sec(-100), End: audit.EndReleased}, // entirely before
		{Seq: 2, Holder: "span", GrantedAt: sec(-100), EndedAt: sec(2000), End: audit.EndReleased, Observed: true},
	}
	in.Renewals = nil
	tl := buildTimeline(in)
	if len(tl.Bars) != 1 {
		t.Fatalf("bars = %+v, want only the tenure overlapping the window", tl.Bars)
	}
	b := tl.Bars[0]
	near(t, "x", b.X, tlGutter)
	near(t, "width", b.W, 1016)
	if b.End != "" {
		t.Errorf("end marker %q drawn for an end beyond the window", b.End)
	}
	if b.Observed {
		t.Errorf("first-seen marker drawn at the window's edge, not the tenure's start")
	}
}

func TestTimelineDenseRenewalsDrawAsABand(t *testing.T) {
	in := baseInput()
	// 400 renewals one second apart on a 400-unit bar: closer than the
	// minimum tick gap.
	in.Tenures = []audit.Tenure{{Seq: 1, Holder: "busy", Token: audit.Int64(1), GrantedAt: sec(100), Renewals: 400,
		LastRenewedAt: sec(500), LeaseDuration: 3 * time.Second, ExpiresAt: sec(503)}}
	in.Renewals = nil
	for i := 1; i <= 400; i++ {
		in.Renewals = append(in.Renewals, sec(100+i))
	}
	b := buildTimeline(in).Bars[0]
	if len(b.Ticks) != 0 || b.BandW == 0 {
		t.Fatalf("ticks = %d, band width %v: want one band", len(b.Ticks), b.BandW)
	}
	near(t, "band x", b.BandX, xAt(100))
	near(t, "band width", b.BandW, 400)
	if !strings.Contains(b.BandTitle, "400 renewals") {
		t.Errorf("band title %q lacks the renewal count", b.BandTitle)
	}

	t.Run("JustSparseEnough", func(t *testing.T) {
		in.Renewals = nil
		for i := 1; i <= 100; i++ {
			in.Renewals = append(in.Renewals, sec(100+4*i))
		}
		b := buildTimeline(in).Bars[0]
		if len(b.Ticks) != 100 || b.BandW != 0 {
			t.Errorf("ticks = %d, band %v: want 100 ticks 4 units apart", len(b.Ticks), b.BandW)
		}
	})
	t.Run("IncompleteRenewalsAreABand", func(t *testing.T) {
		// The store returned only the newest renewals, from 300 on: the
		// tenure's earlier renewals are unknown, so ticks would lie.
		in.RenewalsFrom = sec(300)
		b := buildTimeline(in).Bars[0]
		if len(b.Ticks) != 0 || b.BandW == 0 {
			t.Errorf("ticks = %d, band %v: want a band", len(b.Ticks), b.BandW)
		}
	})
}

func TestTimelineHazardsAndBlindWindows(t *testing.T) {
	in := baseInput()
	in.Findings = []audit.Finding{
		{ID: 1, Kind: audit.FindingOverlap, At: sec(300), Until: sec(310), Summary: "bob granted while alice's lease ran"},
		{ID: 2, Kind: audit.FindingExposure, At: sec(300), Until: sec(400), Resource: "db"},
		{ID: 3, Kind: audit.FindingBlindWindow, At: sec(500), Until: sec(600), Summary: "disconnected"},
		{ID: 4, Kind: audit.FindingLateRenewal, At: sec(320)},                    // no shading
		{ID: 5, Kind: audit.FindingBlindWindow, At: sec(2000), Until: sec(2100)}, // after the window
	}
	tl := buildTimeline(in)
	if len(tl.Hazards) != 2 || len(tl.Blinds) != 1 {
		t.Fatalf("hazards %+v, blinds %+v: want 2 hazards and 1 blind window", tl.Hazards, tl.Blinds)
	}
	o, e := tl.Hazards[0], tl.Hazards[1]
	near(t, "overlap x", o.X, xAt(300))
	near(t, "overlap width", o.W, 10)
	if o.Kind != "overlap" || o.Href != "#finding-1" || o.Label != "" || !strings.Contains(o.Title, "alice's lease") {
		t.Errorf("overlap = %+v: want linked, unlabelled (too narrow), with its summary", o)
	}
	near(t, "exposure width", e.W, 100)
	if e.Kind != "exposure" || e.Label != "exposure" {
		t.Errorf("exposure = %+v, want labelled", e)
	}
	near(t, "blind x", tl.Blinds[0].X, xAt(500))
	near(t, "blind width", tl.Blinds[0].W, 100)
	if !strings.Contains(tl.Blinds[0].Title, "1m40s") {
		t.Errorf("blind title %q lacks its length", tl.Blinds[0].Title)
	}

	t.Run("ShortExposuresAreMarks", func(t *testing.T) {
		// Three exposures of milliseconds within a pixel are one mark that
		// counts them; one a few pixels on is a mark of its own; a long one
		// and an instant overlap are still spans across the lanes.
		ms := func(s, m int) time.Time { return sec(s).Add(time.Duration(m) * time.Millisecond) }
		in.Findings = []audit.Finding{
			{ID: 1, Kind: audit.FindingExposure, At: sec(200), Until: ms(200, 12), Resource: "db"},
			{ID: 2, Kind: audit.FindingExposure, At: ms(200, 500), Until: ms(200, 520), Resource: "db"},
			{ID: 3, Kind: audit.FindingExposure, At: ms(201, 0), Until: ms(201, 3), Resource: "cache"},
			{ID: 4, Kind: audit.FindingExposure, At: sec(210), Until: ms(210, 8), Resource: "db"},
			{ID: 5, Kind: audit.FindingExposure, At: sec(300), Until: sec(340), Resource: "db"},
			{ID: 6, Kind: audit.FindingOverlap, At: sec(400)},
		}
		h := buildTimeline(in).Hazards
		if len(h) != 4 {
			t.Fatalf("hazards = %+v, want 2 marks and 2 spans", h)
		}
		if !h[0].Mark || h[0].Href != "#finding-1" || !strings.Contains(h[0].Title, "3 short exposures") {
			t.Errorf("first mark = %+v, want one linked mark counting 3 exposures", h[0])
		}
		if !h[1].Mark || h[1].Href != "#finding-4" || strings.Contains(h[1].Title, "short exposures") {
			t.Errorf("second mark = %+v, want a mark of exposure 4 alone", h[1])
		}
		if h[2].Mark || h[2].Kind != "exposure" || h[3].Mark || h[3].Kind != "overlap" {
			t.Errorf("spans = %+v %+v, want the long exposure and the overlap as spans", h[2], h[3])
		}
	})

	t.Run("InstantOverlapStillVisible", func(t *testing.T) {
		in.Findings = []audit.Finding{{ID: 9, Kind: audit.FindingOverlap, At: sec(300)}}
		if h := buildTimeline(in).Hazards; len(h) != 1 || h[0].W < 2 {
			t.Errorf("instant overlap = %+v, want at least 2 units wide", h)
		}
	})
}

func TestTimelineWritesOnTheWritersLane(t *testing.T) {
	in := baseInput()
	in.Writes = []audit.Event{
		{Kind: audit.EventWriteRejected, At: sec(350), Holder: "alice", Token: audit.Int64(41), Resource: "db"},
		{Kind: audit.EventWriteAccepted, At: sec(400), Token: audit.Int64(42), Resource: "db"}, // no holder: by token
		{Kind: audit.EventWriteAccepted, At: sec(360), Holder: "alice", Token: audit.Int64(41), Resource: "cache"},
		{Kind: audit.EventWriteAccepted, At: sec(370), Resource: "db"}, // nobody known
	}
	tl := buildTimeline(in)
	if len(tl.Writes) != 4 {
		t.Fatalf("writes = %+v, want 4", tl.Writes)
	}
	if len(tl.Lanes) != 3 || tl.Lanes[2].Label != "(unknown writer)" {
		t.Errorf("lanes = %+v, want a third lane for the unknown writer", tl.Lanes)
	}
	mid := func(lane int) float64 { return tlTopPad + float64(lane)*tlLaneH + tlWriteY }
	for i, want := range []struct {
		kind string
		x, y float64
	}{
		{"rejected", xAt(350), mid(0)},
		{"accepted", xAt(400), mid(1)},
		{"unfenced", xAt(360), mid(0)}, // token 41's tenure ended at 300
		{"accepted", xAt(370), mid(2)},
	} {
		w := tl.Writes[i]
		if w.Kind != want.kind {
			t.Errorf("write %d kind = %q, want %q", i, w.Kind, want.kind)
		}
		near(t, fmt.Sprintf("write %d x", i), w.X, want.x)
		near(t, fmt.Sprintf("write %d y", i), w.Y, want.y)
	}
	if !strings.Contains(tl.Writes[2].Title, "UNFENCED: token 41's tenure ended 1m0s before this write") {
		t.Errorf("unfenced write title = %q, want the reason", tl.Writes[2].Title)
	}
	if !strings.Contains(tl.Writes[0].Title, "write rejected by db") || !strings.Contains(tl.Writes[0].Title, "token 41") {
		t.Errorf("rejected write title = %q", tl.Writes[0].Title)
	}
}

func TestTimelineAxis(t *testing.T) {
	tl := buildTimeline(baseInput())
	// 1016 s: a tick every 2 minutes from 10:00.
	if len(tl.Ticks) != 9 {
		t.Fatalf("ticks = %+v, want 9", tl.Ticks)
	}
	if tl.Ticks[0].Label != "Mar 1 10:00" || tl.Ticks[1].Label != "10:02" {
		t.Errorf("labels %q, %q: want the date on the first only", tl.Ticks[0].Label, tl.Ticks[1].Label)
	}
	near(t, "tick 10:02", tl.Ticks[1].X, xAt(120))
	if tl.Zone != "UTC" {
		t.Errorf("zone = %q", tl.Zone)
	}

	t.Run("LocalZone", func(t *testing.T) {
		in := baseInput()
		loc := time.FixedZone("UTC+5:30", 5*3600+1800)
		in.Loc = loc
		tl := buildTimeline(in)
		if tl.Ticks[0].Label != "Mar 1 15:30" {
			t.Errorf("first label = %q, want the local time", tl.Ticks[0].Label)
		}
	})
	t.Run("Week", func(t *testing.T) {
		in := baseInput()
		in.From, in.To = tlT, tlT.Add(7*24*time.Hour)
		tl := buildTimeline(in)
		if len(tl.Ticks) != 7 || tl.Ticks[0].Label != "Mar 2" || !tl.Ticks[0].Major {
			t.Errorf("week ticks = %+v, want 7 midnights", tl.Ticks)
		}
	})
}

func TestTimelineManyHolders(t *testing.T) {
	in := baseInput()
	in.Tenures = nil
	in.Renewals = nil
	for i := range 20 {
		in.Tenures = append(in.Tenures, audit.Tenure{Seq: int64(i + 1), Holder: fmt.Sprintf("h%02d", i),
			GrantedAt: sec(40 * i), EndedAt: sec(40*i + 30), End: audit.EndReleased})
	}
	tl := buildTimeline(in)
	if len(tl.Lanes) != tlMaxLanes {
		t.Fatalf("lanes = %d, want %d", len(tl.Lanes), tlMaxLanes)
	}
	if tl.Lanes[0].Label != "+9 earlier holders" || tl.Lanes[1].Label != "h09" || tl.Lanes[tlMaxLanes-1].Label != "h19" {
		t.Errorf("lanes %q, %q, %q: want the earliest merged, the latest on their own", tl.Lanes[0].Label, tl.Lanes[1].Label, tl.Lanes[tlMaxLanes-1].Label)
	}
	near(t, "h00 on the shared lane", tl.Bars[0].Y, laneTop(0))
	near(t, "h19 on the last lane", tl.Bars[19].Y, laneTop(tlMaxLanes-1))
}

func TestTimelineEmptyAndHostile(t *testing.T) {
	in := baseInput()
	in.Tenures, in.Renewals = nil, nil
	tl := buildTimeline(in)
	if tl.Empty == "" || len(tl.Lanes) != 1 {
		t.Errorf("empty timeline: %+v, want one blank lane and a message", tl)
	}

	in = baseInput()
	hostile := "\x1b[31m<script>alert(1)</script>\u202e" + strings.Repeat("x", 40)
	in.Tenures[0].Holder = hostile
	tl = buildTimeline(in)
	l := tl.Lanes[0]
	if strings.ContainsAny(l.Full, "\x1b\u202e") || strings.ContainsAny(tl.Bars[0].Title, "\x1b\u202e") {
		t.Errorf("control characters survive: %q / %q", l.Full, tl.Bars[0].Title)
	}
	if len([]rune(l.Label)) != tlLabelChars || !strings.HasSuffix(l.Label, "…") || !strings.Contains(l.Full, "<script>") {
		t.Errorf("label %q (full %q): want it shortened, the full text kept for the tooltip", l.Label, l.Full)
	}
}

// The geometry never leaves the plot, whatever the input.
func TestTimelineStaysInsideThePlot(t *testing.T) {
	in := baseInput()
	in.Tenures = append(in.Tenures, audit.Tenure{Seq: 3, Holder: "x", GrantedAt: sec(5000)}) // after the window: held, in the future
	tl := buildTimeline(in)
	check := func(what string, x, w float64) {
		if x < tl.PlotX0-0.01 || x+w > tl.PlotX1+0.01 {
			t.Errorf("%s spans %.1f..%.1f, outside %.1f..%.1f", what, x, x+w, tl.PlotX0, tl.PlotX1)
		}
	}
	for i, b := range tl.Bars {
		check(fmt.Sprintf("bar %d", i), b.X, b.W)
	}
	var _ views.Timeline = tl
}

// Hundreds of short tenures on a wide window merge, per lane, into runs
// that stand for them, instead of one-unit links nobody can hit.
func TestTimelineDenseTenuresMerge(t *testing.T) {
	in := baseInput()
	in.Tenures, in.Renewals = nil, nil
	for i := range 400 {
		h := []string{"a", "b"}[i%2]
		in.Tenures = append(in.Tenures, audit.Tenure{Seq: int64(i + 1), Holder: h, Token: audit.Int64(int64(100 + i)),
			GrantedAt: sec(2 * i), EndedAt: sec(2*i + 2), End: audit.EndReleased, Renewals: 1})
	}
	tl := buildTimeline(in)
	if len(tl.Bars) > 20 {
		t.Fatalf("%d bars for 400 two-second tenures, want a few runs", len(tl.Bars))
	}
	first := tl.Bars[0]
	if !first.Dense || first.End != "" || first.Label != "" || !strings.Contains(first.Title, "tenures of a") || !strings.Contains(first.Title, "tokens 100–") {
		t.Errorf("first run = %+v", first)
	}
	if !strings.Contains(first.Href, "from=2025-03-01T10:00:00Z") {
		t.Errorf("run zoom = %q, want from its first grant", first.Href)
	}
	near(t, "run x", first.X, xAt(0))

	// A wide tenure breaks a run and draws on its own.
	in.Tenures = append(in.Tenures, audit.Tenure{Seq: 401, Holder: "a", Token: audit.Int64(900), GrantedAt: sec(820), EndedAt: sec(1000), End: audit.EndExpired})
	tl = buildTimeline(in)
	last := tl.Bars[len(tl.Bars)-1]
	if last.Dense || last.End != "expired" || last.Label != "900" {
		t.Errorf("wide tenure after a run = %+v", last)
	}
}

// Renewal times are skipped only when the timeline would draw every tenure's
// renewals as a band anyway: the timeline is the same with and without them.
func TestTimelineSkipsRenewalsOnlyWhenAllAreBands(t *testing.T) {
	// A tenure every 5 s, renewed every second: 5 renewals in 5 units.
	dense := baseInput()
	dense.Tenures, dense.Renewals = nil, nil
	for i := range 150 {
		start := sec(100 + 5*i)
		tn := audit.Tenure{Seq: int64(i + 1), Holder: fmt.Sprintf("h%d", i%3), Token: audit.Int64(int64(100 + i)),
			GrantedAt: start, Renewals: 4, LastRenewedAt: start.Add(4 * time.Second), LeaseDuration: 3 * time.Second,
			ExpiresAt: start.Add(7 * time.Second), EndedAt: start.Add(4500 * time.Millisecond), End: audit.EndReleased}
		dense.Tenures = append(dense.Tenures, tn)
		for k := 1; k <= 4; k++ {
			dense.Renewals = append(dense.Renewals, start.Add(time.Duration(k)*time.Second))
		}
	}
	if needRenewalTimes(dense.From, dense.To, dense.Now, dense.Tenures) {
		t.Fatal("dense tenures: renewal times wanted, though none can be drawn one by one")
	}
	skipped := dense
	skipped.Renewals, skipped.RenewalsFrom = nil, dense.To
	with, without := buildTimeline(dense), buildTimeline(skipped)
	if fmt.Sprintf("%+v", with) != fmt.Sprintf("%+v", without) {
		t.Errorf("timeline differs without the renewal times:\nwith    %+v\nwithout %+v", with.Bars[:2], without.Bars[:2])
	}

	// Sparse renewals draw as ticks, so their times are needed; so are a
	// tenure's whose renewals were partly pruned.
	if !needRenewalTimes(tlFrom, tlTo, sec(900), baseInput().Tenures) {
		t.Error("sparse tenures: renewal times not wanted, though they draw as ticks")
	}
	pruned := slices.Clone(dense.Tenures)
	pruned[10].Pruned = &audit.RenewalSummary{Renewals: 3}
	if !needRenewalTimes(dense.From, dense.To, dense.Now, pruned) {
		t.Error("a tenure with pruned renewals: renewal times not wanted, though its count is no longer all in the window")
	}
}
