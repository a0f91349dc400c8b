package views

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/a-h/templ"
)

// Hostile strings a backend could report as a lock name, holder, resource or
// detail: markup for HTML, markup that breaks out of an attribute into SVG,
// and control characters.
const (
	xss    = "<script>alert(1)</script>"
	svgXSS = `"><svg onload=alert(1)>`
)

func renderString(t *testing.T, c templ.Component) string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	return buf.String()
}

func render(t *testing.T, c templ.Component) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(renderString(t, c)))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return doc
}

func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// noMarkupFromData fails if anything but the layout's own scripts, or any
// event-handler attribute, made it into the document.
func noMarkupFromData(t *testing.T, what string, doc *goquery.Document) {
	t.Helper()
	doc.Find("script").Each(func(_ int, s *goquery.Selection) {
		if src, _ := s.Attr("src"); !strings.HasPrefix(src, "/static/") || s.Text() != "" {
			t.Errorf("%s: unexpected script %q", what, s.Text())
		}
	})
	doc.Find("*").Each(func(_ int, s *goquery.Selection) {
		for _, a := range s.Nodes[0].Attr {
			if strings.HasPrefix(strings.ToLower(a.Key), "on") {
				t.Errorf("%s: <%s %s=%q> carries an event handler", what, goquery.NodeName(s), a.Key, a.Val)
			}
		}
	})
	if doc.Find("img").Length() > 0 || doc.Find("main svg:not(.timeline):not(.strip):not([aria-hidden])").Length() > 0 {
		t.Errorf("%s: markup from data became elements", what)
	}
}

func hostileLockRow() LockRow {
	return LockRow{ID: 7, Source: xss, Name: svgXSS, Class: "lock", State: "held", Holder: xss,
		HolderURL: "/locks?holder=" + "%3Cscript%3E", Token: "1", LeftPct: 40, ExpiresIn: "4s",
		Strip: Strip{Width: 160, Title: xss, Segs: []StripSeg{{X: 1, W: 5, Title: svgXSS}},
			Marks: []StripMark{{X: 2, Kind: "handover", Title: svgXSS}, {X: 3, Kind: "critical", Title: xss}}}}
}

func hostileFinding() FindingRow {
	return FindingRow{ID: 1, LockID: 7, Lock: svgXSS, Kind: "overlap", Severity: "critical",
		Summary: xss, Holders: svgXSS, Resource: xss, TimelineURL: "/locks/7?from=a&to=b#finding-1"}
}

func TestPagesEscapeBackendData(t *testing.T) {
	pages := map[string]templ.Component{
		"Overview": Overview(OverviewPage{Held: []LockRow{hostileLockRow()}, NearExpiry: []LockRow{hostileLockRow()},
			Findings: []FindingRow{hostileFinding()}, Sources: []SourceRow{{Name: xss, State: "down", Error: svgXSS, Degraded: xss}}}),
		"Locks": Locks(LocksPage{Filter: LockFilter{Q: svgXSS, Source: xss, Holder: svgXSS},
			Sources: []string{xss}, Locks: []LockRow{hostileLockRow()}}),
		"Lock": Lock(LockPage{
			Lock:     LockSummary{ID: 7, Source: xss, Name: svgXSS, Holder: xss, State: "held", LeftPct: -1},
			Timeline: Timeline{Width: 100, Height: 50, Title: svgXSS, Desc: xss, Lanes: []Lane{{Label: xss, Full: svgXSS}}},
			Tenures:  []TenureRow{{Seq: 1, Holder: xss, End: "held"}},
			Findings: []FindingRow{hostileFinding()},
			Events:   []EventRow{{ID: 1, Kind: "grant", Holder: xss, Position: svgXSS, Resource: xss, Detail: []Field{{Key: xss, Value: svgXSS}}}},
			Window:   WindowNav{Hidden: []Field{{Key: "tz", Value: svgXSS}}},
		}),
		"Findings": Findings(FindingsPage{Filter: FindingFilter{Resource: xss, Lock: svgXSS, From: xss}, Findings: []FindingRow{hostileFinding()}}),
		"Sources": Sources(SourcesPage{Sources: []SourceRow{{Name: xss, Kind: "etcd", State: "down", Error: xss, Degraded: svgXSS, Cursor: xss}},
			Blinds: []BlindRow{{Source: svgXSS, Reason: xss}}}),
		"Error": Error(ErrorPage{Status: 404, Title: "Not Found", Message: xss}),
	}
	for name, c := range pages {
		t.Run(name, func(t *testing.T) {
			doc := render(t, c)
			noMarkupFromData(t, name, doc)
			body := doc.Find("body").Text()
			if !strings.Contains(body, xss) && !strings.Contains(body, svgXSS) {
				t.Errorf("%s shows neither hostile string as text", name)
			}
		})
	}
}

func TestLocksPageStates(t *testing.T) {
	t.Run("Empty", func(t *testing.T) {
		doc := render(t, Locks(LocksPage{}))
		if squash(doc.Find("p.empty").Text()) != "No locks match." || doc.Find("table").Length() != 0 || doc.Find("nav.pager").Length() != 0 {
			t.Errorf("empty locks page: %q", squash(doc.Find("main").Text()))
		}
	})
	t.Run("RowsAndPager", func(t *testing.T) {
		rows := []LockRow{
			{ID: 1, Source: "s", Name: "a", State: "held", Holder: "h", HolderURL: "/locks?holder=h", Token: "4", LeftPct: 20, ExpiresIn: "2s", NearExpiry: true},
			{ID: 2, Source: "s", Name: "b", State: "free", LeftPct: -1},
		}
		doc := render(t, Locks(LocksPage{Locks: rows, Total: 250, Next: "/locks?after=2", Prev: "/locks?before=1", First: "/locks",
			Sorts: []Link{{Label: "Name", URL: "/locks?sort=name", Current: true}, {Label: "Lease left", URL: "/locks?sort=margin"}}}))
		if n := doc.Find("table.locks tbody tr").Length(); n != 2 {
			t.Fatalf("rows = %d", n)
		}
		first := doc.Find("table.locks tbody tr").First()
		if !first.HasClass("near-expiry") || !strings.Contains(first.Text(), "⚠ near expiry") || first.Find(".left-fill.p20").Length() != 1 {
			t.Errorf("near-expiry row: %q", squash(first.Text()))
		}
		if first.Find("td.holder a").AttrOr("href", "") != "/locks?holder=h" {
			t.Errorf("holder is not a filter link")
		}
		if !strings.Contains(first.Find(".badge.state-held").Text(), "●") {
			t.Errorf("state has no shape besides colour")
		}
		if got := doc.Find("table.locks tbody tr").Eq(1).Find("td.holder").Text(); got != "—" {
			t.Errorf("empty holder renders %q, want a dash", got)
		}
		if squash(doc.Find("nav.pager").Text()) != "⇤ first ← previous next →" {
			t.Errorf("pager = %q", squash(doc.Find("nav.pager").Text()))
		}
		if !strings.Contains(doc.Find("p.meta").Text(), "250 locks match") || doc.Find("p.meta strong[aria-current]").Text() != "Name" {
			t.Errorf("meta = %q", squash(doc.Find("p.meta").Text()))
		}
	})
	t.Run("SearchCountIsALowerBound", func(t *testing.T) {
		doc := render(t, Locks(LocksPage{Total: 1000, TotalAtLeast: true, Locks: []LockRow{{ID: 1, LeftPct: -1}}}))
		if !strings.Contains(doc.Find("p.meta").Text(), "1000+ locks match") {
			t.Errorf("meta = %q", squash(doc.Find("p.meta").Text()))
		}
	})
	t.Run("UnsafeURLsAreDropped", func(t *testing.T) {
		doc := render(t, Locks(LocksPage{Locks: []LockRow{{ID: 1, LeftPct: -1, Holder: "h", HolderURL: "javascript:alert(1)"}}, Next: "//evil.example/"}))
		if h := doc.Find("td.holder a").AttrOr("href", ""); h != "#" {
			t.Errorf("holder href = %q, want #", h)
		}
		if h := doc.Find(`nav.pager a[rel="next"]`).AttrOr("href", ""); h != "#" {
			t.Errorf("next href = %q, want #", h)
		}
	})
}

func TestOverviewStates(t *testing.T) {
	t.Run("Empty", func(t *testing.T) {
		doc := render(t, Overview(OverviewPage{Live: Live{ID: "overview", URL: "/", Every: 5}}))
		text := squash(doc.Find("main").Text())
		for _, want := range []string{"No held lock is near expiry.", "No lock is held.", "No findings in the last 24 hours.", "No sources configured."} {
			if !strings.Contains(text, want) {
				t.Errorf("empty overview lacks %q", want)
			}
		}
	})
	t.Run("LiveWithFallback", func(t *testing.T) {
		doc := render(t, Overview(OverviewPage{Live: Live{ID: "overview", URL: "/?tz=UTC", Every: 5}}))
		live := doc.Find("div#overview")
		if live.AttrOr("hx-get", "") != "/?tz=UTC" || live.AttrOr("hx-trigger", "") != "every 5s" || live.AttrOr("hx-select", "") != "#overview" {
			t.Errorf("live attributes = %v", live.Nodes[0].Attr)
		}
		if doc.Find("p.refresh a").AttrOr("href", "") != "/?tz=UTC" {
			t.Errorf("no plain refresh link")
		}
	})
	t.Run("CountsAndSeverities", func(t *testing.T) {
		doc := render(t, Overview(OverviewPage{
			Counts:     OverviewCounts{Locks: 12, Held: 7, NearExpiry: 2, Findings24h: 5, Info24h: 84},
			Severities: []SeverityCount{{Severity: "critical", N: 1, URL: "/findings?severity=critical"}, {Severity: "warning", N: 4, URL: "/findings?severity=warning"}},
		}))
		tiles := squash(doc.Find("ul.tiles").Text())
		for _, want := range []string{"12 locks", "7 held", "2 near expiry", "5 findings, 24 h", "and 84 info"} {
			if !strings.Contains(tiles, want) {
				t.Errorf("tiles %q lack %q", tiles, want)
			}
		}
		if !doc.Find("ul.tiles li").FilterFunction(func(_ int, s *goquery.Selection) bool {
			return strings.Contains(s.Text(), "near expiry")
		}).HasClass("warn") {
			t.Errorf("near-expiry tile not marked")
		}
		sev := doc.Find("ul.sevs a")
		if sev.Length() != 2 || squash(sev.First().Text()) != "◆ 1 critical" || sev.First().AttrOr("href", "") != "/findings?severity=critical" {
			t.Errorf("severities = %q", squash(sev.Text()))
		}
	})
}

func TestLockPageStates(t *testing.T) {
	base := LockPage{
		Lock:   LockSummary{ID: 3, Source: "prod", Name: "/locks/orders", State: "free", LeftPct: -1},
		Window: WindowNav{Presets: []Link{{Label: "15m", URL: "/locks/3?window=15m"}, {Label: "1h", Current: true}}, Earlier: "/locks/3?from=a&to=b", Zone: "UTC"},
	}
	t.Run("Empty", func(t *testing.T) {
		doc := render(t, Lock(base))
		text := squash(doc.Find("main").Text())
		for _, want := range []string{"No tenures in this window.", "No findings in this window.", "No events match."} {
			if !strings.Contains(text, want) {
				t.Errorf("empty lock page lacks %q", want)
			}
		}
		if doc.Find("svg.timeline").Length() != 1 {
			t.Errorf("no timeline svg")
		}
		if doc.Find(`nav.window-nav strong[aria-current]`).Text() != "1h" || doc.Find(`nav.window-nav a[href="/locks/3?window=15m#timeline"]`).Length() != 1 {
			t.Errorf("window presets: %q", squash(doc.Find("nav.window-nav").Text()))
		}
		if doc.Find("div#lock-live").Length() != 0 {
			t.Errorf("a page without a live region has one")
		}
	})
	t.Run("EventPagesAndTenureZoom", func(t *testing.T) {
		p := base
		p.Events = []EventRow{{ID: 1, Kind: "renew"}}
		p.EventsOlder = "/locks/3?before=5-9#events"
		p.Tenures = []TenureRow{{Seq: 4, End: "expired", ZoomURL: "/locks/3?from=x&to=y"}}
		doc := render(t, Lock(p))
		if doc.Find(`nav.pager a[rel="next"]`).AttrOr("href", "") != "/locks/3?before=5-9#events" {
			t.Errorf("no older-events link")
		}
		if doc.Find(`td.num a[href="/locks/3?from=x&to=y#timeline"]`).Length() != 1 {
			t.Errorf("tenure does not zoom the timeline")
		}
		if !strings.Contains(doc.Find(".badge.end-expired").Text(), "◇") {
			t.Errorf("end reason has no shape")
		}
	})
}

func TestTimelineSVG(t *testing.T) {
	tl := Timeline{
		Width: 1200, Height: 150, PlotX0: 170, PlotX1: 1186, PlotY0: 26, PlotY1: 86, AxisY: 104,
		Title: "Holder timeline of x", Desc: "2 tenures", Zone: "UTC",
		Lanes:   []Lane{{Y: 26, H: 30, Label: "alice", Full: "alice"}, {Y: 56, H: 30, Label: "bob…", Full: "bob the holder", Odd: true}},
		Ticks:   []AxisTick{{X: 170, Label: "Mar 1 10:00"}, {X: 290, Label: "10:02"}},
		Blinds:  []Mark{{X: 670, W: 100, Title: "collector blind"}},
		Hazards: []Hazard{{X: 470, W: 10, Kind: "overlap", Title: "overlap 10s", Href: "#finding-1"}, {X: 470, W: 100, Kind: "exposure", Label: "exposure", Href: "#finding-2"}},
		Bars: []Bar{
			{X: 270, W: 200, Y: 33, H: 16, Label: "41", LabelX: 274, Title: "alice · token 41", Href: "/locks/1?from=a&to=b", End: "released", EndX: 470, Ticks: []float64{320, 460}},
			{X: 470, W: 430, Y: 63, H: 16, Held: true, TailX: 900, TailW: 10, Title: "bob", Href: "/z", BandX: 470, BandW: 60, BandTitle: "400 renewals"},
			{X: 100, W: 10, Y: 33, H: 16, End: "expired", EndX: 110, Observed: true},
		},
		Writes: []WriteMark{{X: 520, Y: 41, Kind: "rejected", Title: "w1"}, {X: 530, Y: 41, Kind: "unfenced", Title: "w2"}, {X: 570, Y: 71, Kind: "accepted", Title: "w3"}},
		HasNow: true, NowX: 1070,
	}
	doc := render(t, TimelineSVG(tl))
	svg := doc.Find("svg.timeline")
	if svg.AttrOr("viewBox", "") != "0 0 1200.0 150.0" || svg.AttrOr("aria-labelledby", "") != "tl-title tl-desc" {
		t.Errorf("svg attributes = %v", svg.Nodes[0].Attr)
	}
	if svg.Find("title#tl-title").Text() != "Holder timeline of x" || svg.Find("desc").Text() != "2 tenures" {
		t.Errorf("accessible name/description missing")
	}
	bar := svg.Find("a.tenure").First()
	rect := bar.Find("rect.bar")
	if rect.AttrOr("x", "") != "270.0" || rect.AttrOr("width", "") != "200.0" || rect.AttrOr("y", "") != "33.0" {
		t.Errorf("bar rect = %v", rect.Nodes[0].Attr)
	}
	if bar.AttrOr("href", "") != "/locks/1?from=a&to=b" || bar.ChildrenFiltered("title").Text() != "alice · token 41" || bar.Find("text.token").Text() != "41" {
		t.Errorf("bar link, tooltip or label wrong")
	}
	if bar.Find("line.renew").Length() != 2 || bar.Find("polygon.end.released").Length() != 1 {
		t.Errorf("ticks %d, released marker %d", bar.Find("line.renew").Length(), bar.Find("polygon.end.released").Length())
	}
	held := svg.Find("a.tenure.held")
	if held.Find("rect.tail").AttrOr("width", "") != "10.0" || held.Find("rect.renew-band title").Text() != "400 renewals" || held.Find("line.renew").Length() != 0 {
		t.Errorf("held bar: tail, band or ticks wrong")
	}
	if svg.Find("a.tenure.observed line.observed-start").Length() != 1 || svg.Find("a.tenure.end-expired polygon.end.expired").Length() != 1 {
		t.Errorf("observed start or expiry marker missing")
	}
	if svg.Find("g.write.rejected path").Length() != 1 || svg.Find("g.write.unfenced circle.ring").Length() != 1 ||
		svg.Find("g.write.unfenced text.bang").Text() != "!" || svg.Find("g.write.accepted circle").Length() != 2 {
		t.Errorf("write markers wrong: %s", squash(svg.Find("g.write").Text()))
	}
	svg.Find("g.write, g.blind").Each(func(_ int, s *goquery.Selection) {
		if s.AttrOr("tabindex", "") != "0" {
			t.Errorf("%s is not focusable", s.AttrOr("class", ""))
		}
	})
	hz := svg.Find("a.hazard")
	if hz.Length() != 2 || hz.First().AttrOr("href", "") != "#finding-1" || hz.Eq(1).Find("text.hazard-label").Text() != "exposure" ||
		hz.First().Find("rect").First().AttrOr("fill", "") != "url(#tl-overlap)" {
		t.Errorf("hazards wrong")
	}
	if b := svg.Find("g.blind rect").First(); b.AttrOr("fill", "") != "url(#tl-hatch)" || b.AttrOr("height", "") != "60.0" {
		t.Errorf("blind window not hatched across the lanes: %v", b.Nodes[0].Attr)
	}
	if svg.Find("text.tick").Length() != 2 || svg.Find("text.zone").Text() != "UTC" || svg.Find("line.now").Length() != 1 {
		t.Errorf("axis, zone or now line missing")
	}
	if svg.Find("g.lane.odd").Length() != 1 || svg.Find("text.lane-label title").Eq(1).Text() != "bob the holder" {
		t.Errorf("lane tooltips wrong")
	}
}

func TestTimelineSVGEscapesData(t *testing.T) {
	tl := Timeline{Width: 100, Height: 60, PlotY1: 50, Title: svgXSS, Desc: xss, Zone: svgXSS,
		Lanes:   []Lane{{Label: svgXSS, Full: xss}},
		Bars:    []Bar{{W: 10, H: 10, Label: svgXSS, Title: xss, Href: "javascript:alert(1)", BandW: 1, BandTitle: svgXSS, End: svgXSS}},
		Hazards: []Hazard{{W: 1, Kind: "overlap", Label: xss, Title: svgXSS, Href: svgXSS}},
		Writes:  []WriteMark{{Kind: "accepted", Title: svgXSS}},
		Blinds:  []Mark{{W: 1, Title: xss}},
		Empty:   xss,
	}
	out := renderString(t, TimelineSVG(tl))
	for _, bad := range []string{"<script", "<svg onload", "javascript:"} {
		if strings.Contains(out, bad) {
			t.Errorf("timeline contains %q:\n%s", bad, out)
		}
	}
	doc := render(t, TimelineSVG(tl))
	if doc.Find("svg").Length() != 1 {
		t.Errorf("the timeline breaks into %d svg elements", doc.Find("svg").Length())
	}
	if doc.Find("title#tl-title").Text() != svgXSS || doc.Find("text.lane-label title").Text() != xss {
		t.Errorf("hostile text not kept as text")
	}
}

func TestLegendUsesShapesNotOnlyColour(t *testing.T) {
	doc := render(t, timelineLegend())
	text := squash(doc.Find("ul.legend").Text())
	for _, want := range []string{"released", "expired", "superseded", "write accepted", "write rejected", "unfenced write", "overlap", "exposure", "collector blind", "dense renewals"} {
		if !strings.Contains(text, want) {
			t.Errorf("legend lacks %q", want)
		}
	}
}

func TestFindingsAndSourcesStates(t *testing.T) {
	doc := render(t, Findings(FindingsPage{}))
	if squash(doc.Find("p.empty").Text()) != "No findings match." {
		t.Errorf("empty findings page: %q", squash(doc.Find("main").Text()))
	}
	doc = render(t, Findings(FindingsPage{Findings: []FindingRow{{ID: 9, LockID: 2, Lock: "s/l", Severity: "warning", Kind: "late_renewal", TimelineURL: "/locks/2?from=a&to=b#finding-9"}},
		Older: "/findings?before=1-9", Truncated: true, Limit: 1}))
	row := doc.Find("tr#finding-9")
	if row.Find("a.tl-link").AttrOr("href", "") != "/locks/2?from=a&to=b#finding-9" || !strings.Contains(row.Find(".badge").Text(), "⚠") {
		t.Errorf("finding row: %q", squash(row.Text()))
	}
	if doc.Find(`nav.pager a[rel="next"]`).AttrOr("href", "") != "/findings?before=1-9" {
		t.Errorf("no older page link")
	}

	doc = render(t, Sources(SourcesPage{}))
	if !strings.Contains(squash(doc.Find("main").Text()), "No sources configured.") || !strings.Contains(squash(doc.Find("main").Text()), "No collector was blind") {
		t.Errorf("empty sources page: %q", squash(doc.Find("main").Text()))
	}
	doc = render(t, Sources(SourcesPage{Sources: []SourceRow{{Name: "cache", State: "up", Degraded: "polling", Blinds: 2, BlindsURL: "/findings?kind=blind_window&source=cache"}},
		Blinds: []BlindRow{{Source: "cache", Duration: "2m0s", Reason: "reconnect", Locks: 3, FindingsURL: "/findings?source=cache"}}}))
	src := squash(doc.Find("table").First().Find("tbody").Text())
	if !strings.Contains(src, "▲ up") || !strings.Contains(src, "polling") {
		t.Errorf("source row = %q", src)
	}
	var cells []string
	doc.Find("table").Eq(1).Find("tbody td").Each(func(_ int, s *goquery.Selection) { cells = append(cells, squash(s.Text())) })
	if strings.Join(cells, "|") != "cache|—|—|2m0s|reconnect|3|findings" {
		t.Errorf("blind row = %q", strings.Join(cells, "|"))
	}
}

func TestSourcesObservationLag(t *testing.T) {
	doc := render(t, Sources(SourcesPage{Sources: []SourceRow{
		{Name: "prod-etcd", State: "up", Lag: "68ms", LagAt: Stamp{Text: "2025-06-01 11:59:58.000Z", ISO: "2025-06-01T11:59:58Z", Ago: "2s ago"}},
		{Name: "cache", State: "down"},
	}}))
	table := doc.Find("table").First()
	col := -1
	table.Find("thead th").Each(func(i int, th *goquery.Selection) {
		if squash(th.Text()) == "Observation lag" {
			col = i
		}
	})
	if col < 0 {
		t.Fatalf("sources table headers %q lack Observation lag", squash(table.Find("thead").Text()))
	}
	cell := table.Find("tbody tr").Eq(0).Find("td").Eq(col)
	if got := squash(cell.Text()); got != "68ms 2s ago" {
		t.Errorf("prod-etcd observation lag = %q, want %q", got, "68ms 2s ago")
	}
	if got := cell.Find("time").AttrOr("datetime", ""); got != "2025-06-01T11:59:58Z" {
		t.Errorf("prod-etcd lag measured at %q, want the exact time in datetime", got)
	}
	if got := squash(table.Find("tbody tr").Eq(1).Find("td").Eq(col).Text()); got != "—" {
		t.Errorf("cache, no commit yet: observation lag = %q, want —", got)
	}
	if note := squash(doc.Find("#lag-note").Text()); !strings.Contains(note, "Observation lag is how long the slowest observation") {
		t.Errorf("note under the sources table = %q, want what the lag covers", note)
	}
	if render(t, Sources(SourcesPage{})).Find("#lag-note").Length() != 0 {
		t.Errorf("the lag note shows with no sources")
	}
}
