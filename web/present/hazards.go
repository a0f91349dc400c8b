package present

import (
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// exposureSpanPx is the narrowest exposure drawn as a span across the
// lanes: a narrower one (most are milliseconds: a resource learns a new
// token with its next write) is a mark above the lanes, so that the spans
// left (overlaps, long exposures, blind windows) can be told apart.
const exposureSpanPx = 4

// hazards are the timeline's blind windows, and its overlaps and exposures
// linked to their findings: spans, and short exposures as marks, several
// within a pixel or two of each other one mark that counts them.
func hazards(in timelineInput, sc timelineScale) (blinds []views.Mark, hs []views.Hazard) {
	loc := in.Loc
	labelEnd := 0.0
	// The last exposure mark: its index in hs, how many exposures it
	// stands for, and the first one's time and description.
	lastMark, marked := -1, 0
	var markAt time.Time
	var markFirst string
	for _, f := range in.Findings {
		until := f.Until
		if until.IsZero() {
			until = f.At
		}
		if until.Before(in.From) || f.At.After(in.To) {
			continue
		}
		x, x2 := sc.x(f.At), sc.x(until)
		w := max(1, x2-x)
		if f.Kind == audit.FindingOverlap {
			w = max(2, w)
		}
		span := until.Sub(f.At)
		title := fmt.Sprintf("%s %s → %s (%s)\n%s", f.Kind, clock(f.At, loc), clock(until, loc), duration(span), printable(f.Summary))
		switch f.Kind {
		case audit.FindingBlindWindow:
			blinds = append(blinds, views.Mark{X: x, W: w,
				Title: fmt.Sprintf("collector blind %s → %s (%s)\n%s", clock(f.At, loc), clock(until, loc), duration(span), printable(f.Summary))})
		case audit.FindingExposure:
			if x2-x >= exposureSpanPx {
				hs = append(hs, hazardSpan(in, f, x, w, title, &labelEnd))
				continue
			}
			if lastMark >= 0 && x-hs[lastMark].X < 2 {
				marked++
				hs[lastMark].Title = fmt.Sprintf("%d short exposures from %s\nthe first: %s", marked, clock(markAt, loc), markFirst)
				continue
			}
			hs = append(hs, views.Hazard{X: x, W: 2, Kind: string(f.Kind), Mark: true, Title: title, Href: findingHref(in, f)})
			lastMark, marked, markAt, markFirst = len(hs)-1, 1, f.At, title
		case audit.FindingOverlap:
			hs = append(hs, hazardSpan(in, f, x, w, title, &labelEnd))
		}
	}
	return blinds, hs
}

// hazardSpan is an overlap or a long exposure drawn across the lanes,
// labelled when its label fits and does not run into the last one.
func hazardSpan(in timelineInput, f audit.Finding, x, w float64, title string, labelEnd *float64) views.Hazard {
	h := views.Hazard{X: x, W: w, Kind: string(f.Kind), Title: title, Href: findingHref(in, f)}
	if lw := float64(len(f.Kind))*6.5 + 4; w >= lw && x >= *labelEnd {
		h.Label = string(f.Kind)
		*labelEnd = x + lw
	}
	return h
}

func findingHref(in timelineInput, f audit.Finding) string {
	if in.FindingHref == nil {
		return ""
	}
	return in.FindingHref(f)
}
