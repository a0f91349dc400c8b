package present

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// findingRows are the rows of findings (oldest first), newest first. The
// exposures shorter than under (0: none) of one lock and resource fold into
// one row, where the newest of them stands, which links to each; a fold of
// one stays a plain row. The findings themselves, and the verdict's and the
// review's exposure figures made from them, are unchanged.
func findingRows(findings []audit.Finding, loc *time.Location, under time.Duration) []views.FindingRow {
	type fold struct {
		row            int // in rows
		n              int
		longest, total time.Duration
		from, to       time.Time
		lockID         int64
		resource       string
		ids            []int64 // the folded findings but the newest
	}
	var rows []views.FindingRow
	var folds []*fold
	byKey := map[string]*fold{}
	for _, f := range slices.Backward(findings) {
		d := f.Until.Sub(f.At)
		if under <= 0 || f.Kind != audit.FindingExposure || f.Until.IsZero() || d >= under {
			rows = append(rows, findingRow(f, loc))
			continue
		}
		key := strconv.FormatInt(f.LockID, 10) + "\x00" + f.Resource
		g := byKey[key]
		if g == nil {
			g = &fold{row: len(rows), lockID: f.LockID, resource: f.Resource, to: f.Until}
			byKey[key] = g
			folds = append(folds, g)
			rows = append(rows, findingRow(f, loc))
		} else {
			g.ids = append(g.ids, f.ID)
		}
		g.n++
		g.longest, g.total, g.from = max(g.longest, d), g.total+d, f.At
	}
	for _, g := range folds {
		if g.n == 1 {
			continue
		}
		r := &rows[g.row]
		r.At, r.Until = stampIn(g.from, loc), stampIn(g.to, loc)
		r.Tokens, r.Holders = "", ""
		r.Duration = duration(g.longest) + " longest"
		r.Summary = fmt.Sprintf("%d exposures of %s, each shorter than %s (%s in all): each the time from a grant to the resource's first write under its token",
			g.n, printable(g.resource), duration(under), duration(g.total))
		r.Folded = g.ids
		r.FoldURL = "/findings?" + url.Values{"kind": {string(audit.FindingExposure)}, "lock": {strconv.FormatInt(g.lockID, 10)},
			"resource": {g.resource}, "class": {"all"},
			"from": {g.from.UTC().Format(time.RFC3339Nano)}, "to": {g.to.UTC().Format(time.RFC3339Nano)}}.Encode()
		pad := max(g.to.Sub(g.from)/10, time.Minute)
		r.TimelineURL = fmt.Sprintf("/locks/%d?", g.lockID) + url.Values{
			"from": {g.from.Add(-pad).UTC().Format(time.RFC3339Nano)},
			"to":   {g.to.Add(pad).UTC().Format(time.RFC3339Nano)},
		}.Encode()
	}
	return rows
}
