package views

import "strconv"

// Timeline is the holder timeline's geometry, in SVG user units. The web
// package computes it from tenures, renewals, writes and findings; the
// component only draws it.
type Timeline struct {
	Width, Height  float64
	PlotX0, PlotX1 float64 // the time axis spans these x
	PlotY0, PlotY1 float64 // lanes span these y
	AxisY          float64 // baseline of the axis labels
	Title, Desc    string  // accessible name and summary
	Zone           string  // time zone of the axis labels
	Lanes          []Lane
	Ticks          []AxisTick
	Blinds         []Mark // hatched across every lane
	Hazards        []Hazard
	Bars           []Bar
	Writes         []WriteMark
	HasNow         bool
	NowX           float64
	HasAt          bool    // the page asks about an instant (?at=), inside the window
	AtX            float64 // where it is drawn
	Empty          string  // shown when nothing happened in the window
}

// Lane is one holder's row.
type Lane struct {
	Y, H  float64
	TextY float64 // baseline of the label, level with the lane's bars
	Label string  // possibly shortened
	Full  string  // the whole holder, for the tooltip
	Odd   bool
}

// AxisTick is one labelled time on the axis, with a grid line.
type AxisTick struct {
	X     float64
	Label string
	Major bool // a day boundary, drawn stronger
}

// Mark is an interval drawn across the lanes, with its tooltip.
type Mark struct {
	X, W  float64
	Title string
}

// Hazard is an overlap or exposure window, linked to its finding.
type Hazard struct {
	X, W  float64
	Kind  string // "overlap" or "exposure"
	Label string // shown when the window is wide enough
	Title string
	Href  string
	// Mark: short exposures, drawn above the lanes rather than across
	// them (several within a pixel or two are one mark).
	Mark bool
}

// Bar is one tenure.
type Bar struct {
	X, W, Y, H float64
	Held       bool
	At         bool    // the tenure current at the page's ?at=
	Observed   bool    // grant not seen: the start is only when it was first seen
	Dense      bool    // stands for a run of tenures too short to draw one by one
	TailX      float64 // after the last renewal: the lease running out
	TailW      float64
	Label      string // the token, when the bar is wide enough
	LabelX     float64
	Title      string
	Href       string // zoom to this tenure
	End        string // "released", "expired", "superseded"; "" when held or beyond the window
	EndX       float64
	Ticks      []float64 // renewal x positions, when sparse enough to draw one by one
	BandX      float64   // dense renewals drawn as one band
	BandW      float64
	BandTitle  string
}

// WriteMark is one reported write on its writer's lane.
type WriteMark struct {
	X, Y  float64
	Kind  string // "accepted", "rejected" or "unfenced"
	Title string
}

// f1 formats an SVG coordinate with one decimal.
func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// markPath is a short exposure's mark: a small downward triangle above the
// lanes at x, its tip at the lanes' top y0.
func markPath(x, y0 float64) string {
	return "M" + f1(x-3) + " " + f1(y0-9) + "h6l-3 7z"
}

// endShape returns the polygon of an end marker at x on a bar.
func endShape(kind string, x, y, h float64) string {
	mid := y + h/2
	switch kind {
	case "expired": // an open diamond
		return f1(x) + "," + f1(mid-6) + " " + f1(x+6) + "," + f1(mid) + " " + f1(x) + "," + f1(mid+6) + " " + f1(x-6) + "," + f1(mid)
	case "superseded": // a triangle pointing into the next tenure
		return f1(x-5) + "," + f1(mid-6) + " " + f1(x+4) + "," + f1(mid) + " " + f1(x-5) + "," + f1(mid+6)
	default: // released: a flat cap across the bar
		return f1(x-2) + "," + f1(y-3) + " " + f1(x+1) + "," + f1(y-3) + " " + f1(x+1) + "," + f1(y+h+3) + " " + f1(x-2) + "," + f1(y+h+3)
	}
}

// cross returns the path of a ✕ of half-size r centred on x, y.
func cross(x, y, r float64) string {
	return "M" + f1(x-r) + " " + f1(y-r) + "L" + f1(x+r) + " " + f1(y+r) + "M" + f1(x+r) + " " + f1(y-r) + "L" + f1(x-r) + " " + f1(y+r)
}
