package present

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
)

// Timeline geometry, in SVG user units. The SVG scales to its container, so
// these are proportions as much as pixels.
const (
	tlWidth      = 1200.0
	tlGutter     = 170.0 // holder labels
	tlRightPad   = 14.0
	tlTopPad     = 26.0 // hazard labels and "now"
	tlLaneH      = 36.0
	tlBarH       = 16.0
	tlBarTop     = 5.0  // bar's offset in its lane
	tlWriteY     = 28.0 // write markers' centre in a lane, below the bar and its token
	tlAxisH      = 40.0
	tlMaxLanes   = 12   // more holders share one last lane
	tlMinTickGap = 3.0  // renewals closer than this draw as a band
	tlMaxTicks   = 1500 // renewal ticks over the whole timeline
	tlLabelChars = 24
)

// timelineInput is everything the holder timeline shows.
type timelineInput struct {
	Lock     string // SOURCE/NAME, for the accessible title
	From, To time.Time
	Now      time.Time
	Loc      *time.Location
	Tenures  []audit.Tenure // in grant order
	// Renewals are renewal times within the window, in time order. When the
	// store returned only the newest ones, RenewalsFrom is the oldest time
	// they are complete from; tenure parts before it draw as bands.
	Renewals     []time.Time
	RenewalsFrom time.Time
	Writes       []audit.Event   // write_accepted and write_rejected, in time order
	Findings     []audit.Finding // overlapping the window
	// WriteBins, when not nil, stands for Writes when the window holds too
	// many writes to draw one by one: they are counted per stretch of time on
	// a lane of their own.
	WriteBins *writeBins
	// At, when not zero, is the instant the page asks about (?at=), marked
	// on the axis; AtSeq is the seq of the tenure current then, drawn
	// highlighted (0 for none).
	At    time.Time
	AtSeq int64
	// Zoom returns the URL of the same page over another window.
	Zoom func(from, to time.Time) string
	// FindingHref returns the URL that explains a finding.
	FindingHref func(f audit.Finding) string
}

// timelineScale maps times to x.
type timelineScale struct {
	from, to time.Time
	x0, x1   float64
}

func (s timelineScale) x(t time.Time) float64 {
	span := s.to.Sub(s.from)
	if span <= 0 {
		return s.x0
	}
	f := float64(t.Sub(s.from)) / float64(span)
	return s.x0 + min(1, max(0, f))*(s.x1-s.x0)
}

// buildTimeline computes the timeline's geometry. It is a pure function of
// its input.
func buildTimeline(in timelineInput) views.Timeline {
	if in.Loc == nil {
		in.Loc = time.UTC
	}
	sc := timelineScale{from: in.From, to: in.To, x0: tlGutter, x1: tlWidth - tlRightPad}
	tl := views.Timeline{Width: tlWidth, PlotX0: sc.x0, PlotX1: sc.x1, Zone: zoneName(in.Loc)}
	ln := newTimelineLanes(in)
	ln.draw(&tl, in.WriteBins)

	tl.Ticks = axisTicks(in.From, in.To, in.Loc, sc)
	if !in.Now.Before(in.From) && !in.Now.After(in.To) {
		tl.HasNow, tl.NowX = true, sc.x(in.Now)
	}
	if !in.At.IsZero() && !in.At.Before(in.From) && !in.At.After(in.To) {
		tl.HasAt, tl.AtX = true, sc.x(in.At)
	}
	tl.Blinds, tl.Hazards = hazards(in, sc)
	tl.Bars = tenureBars(in, sc, ln)
	tl.Writes = writeMarks(in, sc, ln)

	writes := countOf(len(tl.Writes), "write", "writes")
	if b := in.WriteBins; b != nil {
		y := tlTopPad + float64(ln.n-1)*tlLaneH
		tl.Writes = append(tl.Writes, b.marks(sc, y, in.Loc)...)
		writes = b.total()
	}
	if len(tl.Bars) == 0 && len(tl.Writes) == 0 {
		tl.Empty = "nothing held or written in this window"
	}
	tl.Title = fmt.Sprintf("Holder timeline of %s", printable(in.Lock))
	tl.Desc = fmt.Sprintf("%s to %s: %s, %s, %s, %s.", stampText(in.From, in.Loc), stampText(in.To, in.Loc),
		countOf(len(tl.Bars), "tenure", "tenures"), writes,
		countOf(len(tl.Hazards), "hazard window", "hazard windows"), countOf(len(tl.Blinds), "blind window", "blind windows"))
	if in.WriteBins != nil {
		tl.Desc += " " + in.WriteBins.note()
	}
	return tl
}

// timelineLanes are the timeline's lanes: one per holder in order of first
// appearance, writers without a tenure in the window after them, and the
// counted writes' lane last when there is one. With more holders than
// lanes, the earliest share the first lane: the holders nearest the
// window's end matter most.
type timelineLanes struct {
	index       map[string]int
	holders     []string
	tokenHolder map[int64]string
	merged      int // holders sharing the first lane; 0 for none
	n           int // lanes drawn
	binned      bool
}

func newTimelineLanes(in timelineInput) *timelineLanes {
	ln := &timelineLanes{index: map[string]int{}, tokenHolder: map[int64]string{}, binned: in.WriteBins != nil}
	for _, t := range in.Tenures {
		ln.add(t.Holder)
	}
	for _, t := range in.Tenures {
		if t.Token != nil {
			ln.tokenHolder[*t.Token] = t.Holder
		}
	}
	for _, w := range in.Writes {
		ln.add(ln.writer(w))
	}
	if len(ln.holders) > tlMaxLanes {
		ln.merged = len(ln.holders) - (tlMaxLanes - 1)
	}
	ln.n = min(len(ln.holders), tlMaxLanes)
	if ln.n == 0 && !ln.binned {
		ln.n = 1
	}
	if ln.binned {
		ln.n++
	}
	return ln
}

func (ln *timelineLanes) add(h string) {
	if _, ok := ln.index[h]; ok {
		return
	}
	ln.index[h] = len(ln.holders)
	ln.holders = append(ln.holders, h)
}

// writer is the lane a write goes on: its holder's, else its token's
// holder's, else a lane of its own.
func (ln *timelineLanes) writer(e audit.Event) string {
	if _, ok := ln.index[e.Holder]; ok && e.Holder != "" {
		return e.Holder
	}
	if e.Token != nil {
		if h, ok := ln.tokenHolder[*e.Token]; ok {
			return h
		}
	}
	if e.Holder != "" {
		return e.Holder
	}
	return "\x00unknown"
}

// of is holder h's lane.
func (ln *timelineLanes) of(h string) int {
	i := ln.index[h]
	if ln.merged == 0 {
		return i
	}
	return max(0, i-ln.merged+1)
}

// y is where the bars of holder h's lane begin.
func (ln *timelineLanes) y(h string) float64 {
	return tlTopPad + float64(ln.of(h))*tlLaneH + tlBarTop
}

// draw sets tl's plot height and its lanes with their labels.
func (ln *timelineLanes) draw(tl *views.Timeline, bins *writeBins) {
	tl.PlotY0 = tlTopPad
	tl.PlotY1 = tlTopPad + float64(ln.n)*tlLaneH
	tl.AxisY = tl.PlotY1 + 18
	tl.Height = tl.PlotY1 + tlAxisH
	for i := range ln.n {
		y := tlTopPad + float64(i)*tlLaneH
		l := views.Lane{Y: y, H: tlLaneH, TextY: y + tlBarTop + tlBarH - 4, Odd: i%2 == 1}
		switch {
		case ln.binned && i == ln.n-1:
			l.Label, l.Full = shorten(bins.total(), tlLabelChars), bins.note()
		case len(ln.holders) == 0:
		case ln.merged > 0 && i == 0:
			l.Label = fmt.Sprintf("+%d earlier holders", ln.merged)
			names := make([]string, 0, min(ln.merged, 20))
			for _, h := range ln.holders[max(0, ln.merged-20):ln.merged] {
				names = append(names, holderLabel(h))
			}
			l.Full = strings.Join(names, ", ")
		default:
			l.Full = holderLabel(ln.holders[i+max(0, ln.merged-1)])
			l.Label = shorten(l.Full, tlLabelChars)
		}
		tl.Lanes = append(tl.Lanes, l)
	}
}

// tenureBars draws the tenures in the window, each with its renewals,
// which are assigned to tenures by time (both are in time order).
func tenureBars(in timelineInput, sc timelineScale, ln *timelineLanes) []views.Bar {
	var bars []views.Bar
	ticksLeft := tlMaxTicks
	dense := &denseRuns{byLane: map[int]*denseRun{}}
	ri := 0
	for _, t := range in.Tenures {
		end, endKind := tenureEnd(t, in.Now, in.To)
		if end.Before(in.From) || t.GrantedAt.After(in.To) {
			continue
		}
		b := tenureBar(in, sc, t, end, endKind, ln.y(t.Holder))
		x, x2 := sc.x(t.GrantedAt), sc.x(end)

		// Renewals inside this tenure's visible part.
		visFrom, visTo := audit.MaxTime(t.GrantedAt, in.From), audit.MinTime(end, in.To)
		for ri < len(in.Renewals) && in.Renewals[ri].Before(visFrom) {
			ri++
		}
		var mine []time.Time
		for ri < len(in.Renewals) && !in.Renewals[ri].After(visTo) {
			mine = append(mine, in.Renewals[ri])
			ri++
		}
		complete := in.RenewalsFrom.IsZero() || !visFrom.Before(in.RenewalsFrom)
		ticks, band := renewalMarks(mine, complete, t, visFrom, visTo, sc, ticksLeft)
		if x2-x < tlDenseWidth {
			ticks, band = nil, false // the bar is narrower than a tick
		}
		ticksLeft -= len(ticks)
		b.Ticks = ticks
		if band {
			last := t.LastRenewedAt
			if last.IsZero() || last.After(visTo) {
				last = visTo
			}
			bx := sc.x(visFrom)
			b.BandX, b.BandW = bx, max(1, sc.x(last)-bx)
			b.BandTitle = fmt.Sprintf("%d renewals in this tenure; last %s", t.Renewals, clock(t.LastRenewedAt, in.Loc))
		}
		bars = appendBar(bars, b, t, ln.of(t.Holder), dense)
	}
	for _, d := range dense.all {
		if d.n > 1 {
			finishDense(&bars[d.bar], d, in.Zoom, in.Loc)
		}
	}
	return bars
}

// tenureBar is tenure t's bar at y, ending at end (how: endKind), without
// its renewals.
func tenureBar(in timelineInput, sc timelineScale, t audit.Tenure, end time.Time, endKind string, y float64) views.Bar {
	x, x2 := sc.x(t.GrantedAt), sc.x(end)
	b := views.Bar{X: x, W: max(1.5, x2-x), Y: y, H: tlBarH, Held: t.Held(), Observed: t.Observed && !t.GrantedAt.Before(in.From),
		At: in.AtSeq != 0 && t.Seq == in.AtSeq}
	if endKind != "" && !end.After(in.To) {
		b.End, b.EndX = endKind, x2
	}
	// Expired: the part after the last renewal is the lease running out.
	// Held: the lease stays valid past now until its expiry.
	if t.End == audit.EndExpired && !t.LastRenewedAt.IsZero() && t.LastRenewedAt.Before(end) {
		lx := sc.x(t.LastRenewedAt)
		b.W = max(1.5, lx-x)
		b.TailX, b.TailW = lx, x2-lx
	} else if t.Held() && !t.ExpiresAt.IsZero() && t.ExpiresAt.After(end) {
		b.TailX, b.TailW = x2, sc.x(t.ExpiresAt)-x2
	}
	tok := "no token"
	if t.Token != nil {
		tok = "token " + strconv.FormatInt(*t.Token, 10)
		label := strconv.FormatInt(*t.Token, 10)
		if b.W >= float64(len(label))*7+8 {
			b.Label, b.LabelX = label, b.X+4
		}
	}
	if x2-x < tlDenseWidth {
		// Too narrow for a marker or a label: the tooltip says it all.
		b.End, b.Label = "", ""
	}
	b.Title = tenureTitle(t, tok, endKind, in.Loc)
	if in.Zoom != nil {
		pad := max(end.Sub(t.GrantedAt)/10, 5*time.Second)
		b.Href = in.Zoom(t.GrantedAt.Add(-pad), end.Add(pad))
	}
	return b
}

// writeMarks marks each write drawn one by one on its writer's lane; an
// accepted write from an ended tenure, or older than the newest grant, got
// past the fence.
func writeMarks(in timelineInput, sc timelineScale, ln *timelineLanes) []views.WriteMark {
	var marks []views.WriteMark
	fences := newFenceIndex(in.Tenures)
	unfencedAt := map[int64]bool{}
	for _, f := range in.Findings {
		if f.Kind == audit.FindingUnfencedWrite {
			unfencedAt[f.At.UnixNano()] = true
		}
	}
	for _, e := range in.Writes {
		if e.At.Before(in.From) || e.At.After(in.To) {
			continue
		}
		kind := "accepted"
		note := ""
		if e.Kind == audit.EventWriteRejected {
			kind = "rejected"
		} else if why := fences.unfencedWhy(e); why != "" || unfencedAt[e.At.UnixNano()] {
			kind, note = "unfenced", why
			if note == "" {
				note = "reported as an unfenced write"
			}
		}
		y := ln.y(ln.writer(e)) - tlBarTop + tlWriteY
		tok := "no token"
		if e.Token != nil {
			tok = "token " + strconv.FormatInt(*e.Token, 10)
		}
		title := fmt.Sprintf("write %s by %s at %s\n%s · holder %s", strings.TrimPrefix(string(e.Kind), "write_"),
			orDash(printable(e.Resource)), stampText(e.At, in.Loc), tok, orDash(printable(e.Holder)))
		if note != "" {
			title += "\nUNFENCED: " + note
		}
		marks = append(marks, views.WriteMark{X: sc.x(e.At), Y: y, Kind: kind, Title: title})
	}
	return marks
}

// TimelineWriteBins is how many stretches of its window a timeline counts
// writes in when there are too many to draw one by one
// (query.LockPageQuery.WriteBins): each mark about 12 units wide, so that
// the marks do not touch.
const TimelineWriteBins = 85

// writeBins are a window's writes counted rather than drawn one by one: the
// accepted and rejected writes counted per stretch of the window, and the
// unfenced writes the tracker found, which are few and always drawn one by
// one.
type writeBins struct {
	query.WriteCounts
	// Where every write is listed.
	EventsURL string
}

// writeBinsOf are lock id's counted writes as its timeline draws them; nil
// when they are drawn one by one.
func writeBinsOf(c *query.WriteCounts, id int64) *writeBins {
	if c == nil {
		return nil
	}
	return &writeBins{WriteCounts: *c, EventsURL: fmt.Sprintf("/api/v1/locks/%d/events?kind=write_accepted", id)}
}

// total counts the writes, as the writes lane's label.
func (b *writeBins) total() string {
	s := countOf(b.Accepted.Total()+b.Rejected.Total(), "write", "writes")
	if b.AtLeast {
		s = "at least " + s
	}
	return s
}

// note says what the writes lane shows and where each write is listed.
func (b *writeBins) note() string {
	s := fmt.Sprintf("%s in this window (%d accepted, %d rejected", b.total(), b.Accepted.Total(), b.Rejected.Total())
	if n := len(b.Unfenced) + b.UnfencedMore; n > 0 {
		s += fmt.Sprintf(", %s", countOf(n, "unfenced", "unfenced"))
	}
	s += "), too many to draw one by one: each mark on the writes lane counts the writes of its stretch of time"
	if b.UnfencedMore > 0 {
		s += fmt.Sprintf("; the newest %d unfenced writes are drawn one by one", len(b.Unfenced))
	} else if len(b.Unfenced) > 0 {
		s += "; unfenced writes are drawn one by one"
	}
	if b.AtLeast {
		s += "; counting stopped there, zoom in for exact counts"
	}
	return s + ". Every write: " + b.EventsURL + " or the events API."
}

// marks draws the binned writes on the lane at y: per stretch of time, one
// mark for its accepted writes and one for its rejected writes, each titled
// with its count; and each unfenced write.
func (b *writeBins) marks(sc timelineScale, y float64, loc *time.Location) []views.WriteMark {
	var out []views.WriteMark
	for _, k := range []struct {
		kind   string
		counts audit.Histogram
		dy     float64
	}{{"accepted", b.Accepted, 10}, {"rejected", b.Rejected, 26}} {
		for i, c := range k.counts.Counts {
			if c == 0 {
				continue
			}
			from, to := k.counts.Bin(i)
			// The first and last stretches may reach past the window (whole
			// ticks): the mark sits in the middle of what is shown.
			shownFrom, shownTo := audit.MaxTime(from, sc.from), audit.MinTime(to, sc.to)
			out = append(out, views.WriteMark{
				X: sc.x(shownFrom.Add(shownTo.Sub(shownFrom) / 2)), Y: y + k.dy, Kind: k.kind,
				Title: fmt.Sprintf("%s %s\n%s → %s", countOf(c, "write", "writes"), k.kind, stampText(from, loc), stampText(audit.MinTime(to, sc.to), loc)),
			})
		}
	}
	for _, f := range b.Unfenced {
		out = append(out, views.WriteMark{X: sc.x(f.At), Y: y + 18, Kind: "unfenced",
			Title: fmt.Sprintf("unfenced write at %s\n%s", stampText(f.At, loc), printable(f.Summary))})
	}
	return out
}

// tenureEnd returns where a tenure's bar ends and how: its end, or while
// held, now (or the window's end if that is earlier).
func tenureEnd(t audit.Tenure, now, to time.Time) (time.Time, string) {
	if !t.Held() {
		end := t.EndedAt
		if end.IsZero() {
			end = t.ExpiresAt
		}
		if end.IsZero() {
			end = t.LastRenewedAt
		}
		if end.Before(t.GrantedAt) {
			end = t.GrantedAt
		}
		return end, string(t.End)
	}
	end := audit.MinTime(now, to)
	if end.Before(t.GrantedAt) {
		end = t.GrantedAt
	}
	return end, ""
}

// DrawsRenewals reports whether the timeline of pg, read at now, could draw
// any renewal one by one, and so whether its renewal times are worth
// reading (query.Reader.ReadRenewals): see needRenewalTimes.
func DrawsRenewals(pg query.LockPage, now time.Time) bool {
	return needRenewalTimes(pg.Window.From, pg.Window.To, now, pg.Tenures)
}

// needRenewalTimes reports whether a timeline of tenures over from..to could
// draw any renewal one by one. When every tenure is too narrow to carry ticks,
// or has more renewals (its row counts them all) than fit in its width, each
// is drawn as a band whatever the times, so they need not be read: on a lock
// that changes hands every few seconds they are most of its events.
func needRenewalTimes(from, to, now time.Time, tenures []audit.Tenure) bool {
	sc := timelineScale{from: from, to: to, x0: tlGutter, x1: tlWidth - tlRightPad}
	for _, t := range tenures {
		end, _ := tenureEnd(t, now, to)
		if end.Before(from) || t.GrantedAt.After(to) {
			continue
		}
		width := sc.x(end) - sc.x(t.GrantedAt)
		if width < tlDenseWidth {
			continue // no ticks on a bar this narrow
		}
		whole := !t.GrantedAt.Before(from) && !end.After(to)
		// A held tenure's row may lag its newest renewals: it counts
		// fewer, never more.
		if whole && t.Pruned == nil && float64(t.Renewals)*tlMinTickGap > width {
			continue // all its renewals are in the window, and too many
		}
		return true
	}
	return false
}

// renewalMarks decides how a tenure's renewals are drawn: one tick each when
// every renewal in its visible part is known and they are far enough apart,
// else one band.
func renewalMarks(ts []time.Time, complete bool, t audit.Tenure, from, to time.Time, sc timelineScale, budget int) ([]float64, bool) {
	if t.Renewals == 0 && len(ts) == 0 {
		return nil, false
	}
	width := sc.x(to) - sc.x(from)
	if !complete || len(ts) > budget || float64(len(ts))*tlMinTickGap > width {
		return nil, true
	}
	if len(ts) == 0 {
		// None recorded in the window: the tenure's renewals were all
		// outside it, unless its last renewal says otherwise.
		last := t.LastRenewedAt
		return nil, t.Renewals > 0 && !last.IsZero() && !last.Before(from) && !last.After(to)
	}
	xs := make([]float64, 0, len(ts))
	for _, r := range ts {
		x := sc.x(r)
		if len(xs) > 0 && x-xs[len(xs)-1] < tlMinTickGap {
			return nil, true
		}
		xs = append(xs, x)
	}
	return xs, false
}

// fenceIndex answers, for a write, whether its token's tenure had ended and
// which token the newest grant before it carried, without scanning every
// tenure per write.
type fenceIndex struct {
	grants []time.Time            // tenures with a token, in grant order
	newest []int64                // highest token granted up to each
	ended  map[int64]audit.Tenure // by token
}

func newFenceIndex(tenures []audit.Tenure) fenceIndex {
	fi := fenceIndex{ended: map[int64]audit.Tenure{}}
	best := int64(math.MinInt64)
	for _, t := range tenures {
		if t.Token == nil {
			continue
		}
		best = max(best, *t.Token)
		fi.grants = append(fi.grants, t.GrantedAt)
		fi.newest = append(fi.newest, best)
		if !t.Held() && !t.EndedAt.IsZero() {
			fi.ended[*t.Token] = t
		}
	}
	return fi
}

// unfencedWhy says why an accepted write got past the fence, or "".
func (fi fenceIndex) unfencedWhy(e audit.Event) string {
	if e.Kind != audit.EventWriteAccepted || e.Token == nil {
		return ""
	}
	if t, ok := fi.ended[*e.Token]; ok && t.EndedAt.Before(e.At) {
		return fmt.Sprintf("token %d's tenure ended %s before this write", *e.Token, duration(e.At.Sub(t.EndedAt)))
	}
	// The last grant at or before the write.
	i := sort.Search(len(fi.grants), func(i int) bool { return fi.grants[i].After(e.At) }) - 1
	if i >= 0 && *e.Token < fi.newest[i] {
		return fmt.Sprintf("token %d is older than the newest grant's %d", *e.Token, fi.newest[i])
	}
	return ""
}

// denseRun is a run of bars on one lane too narrow to draw one by one.
type denseRun struct {
	bar      int // index of the bar that stands for the run
	n        int
	first    time.Time
	last     time.Time
	lo, hi   int64 // token range
	hasToken bool
	holder   string
	renewals int64
}

// denseRuns are the runs of narrow bars: the open one per lane, and all.
type denseRuns struct {
	byLane map[int]*denseRun
	all    []*denseRun
}

// tlDenseWidth is the width under which neighbouring tenures of one lane
// merge into one bar: hundreds of one-pixel links help nobody and cost time.
const tlDenseWidth = 3.0

// tlDenseRun caps how wide one run grows, so a busy week still shows its
// gaps and each run zooms to a readable stretch.
const tlDenseRun = 100.0

// appendBar adds a tenure's bar, or widens the lane's current run of narrow
// bars when this one is narrow and follows it closely.
func appendBar(bars []views.Bar, b views.Bar, t audit.Tenure, lane int, dense *denseRuns) []views.Bar {
	end, _ := tenureEnd(t, t.EndedAt, t.EndedAt)
	if t.Held() {
		end = t.LastRenewedAt
	}
	d := dense.byLane[lane]
	if b.W < tlDenseWidth && d != nil && !t.Held() {
		prev := &bars[d.bar]
		if prev.W < tlDenseRun && b.X-(prev.X+prev.W) < tlDenseWidth {
			prev.W = b.X + b.W - prev.X
			d.n++
			d.last = audit.MaxTime(d.last, end)
			d.renewals += t.Renewals
			if t.Token != nil {
				if !d.hasToken {
					d.lo, d.hi, d.hasToken = *t.Token, *t.Token, true
				}
				d.lo, d.hi = min(d.lo, *t.Token), max(d.hi, *t.Token)
			}
			return bars
		}
	}
	run := &denseRun{bar: len(bars), n: 1, first: t.GrantedAt, last: end, holder: t.Holder, renewals: t.Renewals}
	if t.Token != nil {
		run.lo, run.hi, run.hasToken = *t.Token, *t.Token, true
	}
	if b.W < tlDenseWidth {
		dense.byLane[lane] = run
		dense.all = append(dense.all, run)
	} else {
		delete(dense.byLane, lane)
	}
	return append(bars, b)
}

// finishDense turns a run's first bar into the run's bar.
func finishDense(b *views.Bar, d *denseRun, zoom func(from, to time.Time) string, loc *time.Location) {
	tokens := "no tokens"
	if d.hasToken {
		tokens = fmt.Sprintf("tokens %d–%d", d.lo, d.hi)
	}
	b.Title = fmt.Sprintf("%d tenures of %s, %s\n%s → %s, %d renewals\nclick to zoom in", d.n, orDash(printable(d.holder)), tokens,
		stampText(d.first, loc), stampText(d.last, loc), d.renewals)
	b.Dense, b.End, b.Label, b.Ticks, b.TailW, b.BandW, b.Observed = true, "", "", nil, 0, 0, false
	if zoom != nil {
		b.Href = zoom(d.first, d.last)
	}
}

func tenureTitle(t audit.Tenure, tok, endKind string, loc *time.Location) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s · %s\n", orDash(printable(t.Holder)), tok)
	if t.Observed {
		fmt.Fprintf(&b, "first seen %s (held when the collector started)\n", stampText(t.GrantedAt, loc))
	} else {
		fmt.Fprintf(&b, "granted %s\n", stampText(t.GrantedAt, loc))
	}
	fmt.Fprintf(&b, "%d renewals", t.Renewals)
	if !t.LastRenewedAt.IsZero() {
		fmt.Fprintf(&b, ", last %s", stampText(t.LastRenewedAt, loc))
	}
	if t.LeaseDuration > 0 {
		fmt.Fprintf(&b, "; lease %s", duration(t.LeaseDuration))
	}
	if t.Held() {
		b.WriteString("\nstill held")
		if !t.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, ", lease valid until %s", stampText(t.ExpiresAt, loc))
		}
	} else {
		fmt.Fprintf(&b, "\n%s %s", endKind, stampText(t.EndedAt, loc))
	}
	b.WriteString("\nclick to zoom")
	return b.String()
}

// axisTicks returns readable ticks for the window: a step from a fixed
// ladder giving 5 to 12 labels, aligned to the zone's midnight.
func axisTicks(from, to time.Time, loc *time.Location, sc timelineScale) []views.AxisTick {
	span := to.Sub(from)
	if span <= 0 {
		return nil
	}
	steps := []time.Duration{
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour,
		7 * 24 * time.Hour,
	}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 10 {
			step = s
			break
		}
	}
	lf := from.In(loc)
	midnight := time.Date(lf.Year(), lf.Month(), lf.Day(), 0, 0, 0, 0, loc)
	k := lf.Sub(midnight) / step
	t := midnight.Add(k * step)
	if t.Before(from) {
		t = t.Add(step)
	}
	var out []views.AxisTick
	prevDay := -1
	for ; !t.After(to) && len(out) < 40; t = t.Add(step) {
		lt := t.In(loc)
		var label string
		switch {
		case step >= 24*time.Hour:
			label = lt.Format("Jan 2")
		case step < time.Minute:
			label = lt.Format("15:04:05")
		default:
			label = lt.Format("15:04")
		}
		major := lt.Hour() == 0 && lt.Minute() == 0 && lt.Second() == 0
		if step < 24*time.Hour && (prevDay == -1 || lt.YearDay() != prevDay) && (major || prevDay == -1) {
			label = lt.Format("Jan 2 ") + label
		}
		prevDay = lt.YearDay()
		out = append(out, views.AxisTick{X: sc.x(t), Label: label, Major: major})
	}
	return out
}

// clock formats t compactly for tooltips of intervals.
func clock(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return "—"
	}
	return t.In(loc).Format("15:04:05.000")
}

// zoneName names a location for labels.
func zoneName(loc *time.Location) string {
	if loc == nil || loc == time.UTC {
		return "UTC"
	}
	return loc.String()
}

func holderLabel(h string) string {
	switch h {
	case "":
		return "(no holder)"
	case "\x00unknown":
		return "(unknown writer)"
	}
	return printable(h)
}

// shorten cuts s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// sortFindingsForTimeline puts hazards in time order so later ones draw on top.
func sortFindingsForTimeline(fs []audit.Finding) {
	slices.SortStableFunc(fs, func(a, b audit.Finding) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
}
