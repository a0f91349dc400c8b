package present

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/history"
	"github.com/leasewatch/leasewatch/views"
)

// HolderURL is the holder page of h.
func HolderURL(h string) string { return "/holders/" + url.PathEscape(h) }

// holderURLOf is HolderURL, or "" for no holder.
func holderURLOf(h string) string {
	if h == "" {
		return ""
	}
	return HolderURL(h)
}

// FormatTenureCursor writes a tenure cursor, the before of a holder's next
// page of tenures; "" for none.
func FormatTenureCursor(c audit.TenureCursor) string {
	if c.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d-%d-%d", c.GrantedAt.UnixNano(), c.LockID, c.Seq)
}

// Holder is the holder page of h, the tenures that f (read from r.Query)
// asked for.
func Holder(r Request, f audit.HolderFilter, h history.Holding) views.HolderPage {
	base := HolderURL(f.Holder)
	v := views.HolderPage{
		Holder:   printable(f.Holder),
		LocksURL: "/locks?" + url.Values{"holder": {f.Holder}, "class": {"all"}}.Encode(),
		APIURL:   "/api/v1" + base + "/tenures",
	}
	for _, t := range h.Tenures {
		v.Tenures = append(v.Tenures, holderTenureRow(t, r.Loc))
	}
	if cur := FormatTenureCursor(h.Next); cur != "" {
		v.Older = withQuery(base, r.Query, "before", cur)
	}
	if !f.Before.IsZero() {
		v.First = withQuery(base, r.Query, "before", "")
	}
	return v
}

// holderTenureRow shapes one of a holder's tenures for its page.
func holderTenureRow(t history.HolderTenure, loc *time.Location) views.HolderTenureRow {
	id := strconv.FormatInt(t.LockID, 10)
	window := url.Values{"lock": {id}, "from": {t.GrantedAt.UTC().Format(time.RFC3339Nano)}, "to": {t.Until.UTC().Format(time.RFC3339Nano)}}
	row := views.HolderTenureRow{
		Lock:        printable(t.Lock.String()),
		LockURL:     "/locks/" + id + "?" + url.Values{"at": {t.GrantedAt.UTC().Format(time.RFC3339Nano)}}.Encode(),
		Source:      printable(t.Lock.Source),
		Seq:         t.Seq,
		Token:       token(t.Token),
		Granted:     stampIn(t.GrantedAt, loc),
		Observed:    t.Observed,
		Ended:       stampIn(t.EndedAt, loc),
		End:         endText(t.Tenure),
		Findings:    strconv.Itoa(t.Findings),
		FindingsURL: "/findings?" + window.Encode(),
	}
	if t.FindingsAtLeast {
		row.Findings += "+"
	}
	return row
}

// endText is a tenure's end reason, "held" while it is held.
func endText(t audit.Tenure) string {
	if t.Held() {
		return "held"
	}
	return string(t.End)
}

// atBanner says in words what lock l was at the instant of moment m; the
// zero banner when m is nil.
func atBanner(l audit.Lock, m *history.Moment, loc *time.Location) views.AtBanner {
	if m == nil {
		return views.AtBanner{}
	}
	at := m.At
	b := views.AtBanner{State: string(m.State), At: stampIn(at, loc),
		APIURL: fmt.Sprintf("/api/v1/locks/%d/at?", l.ID) + url.Values{"t": {at.UTC().Format(time.RFC3339Nano)}}.Encode()}
	when := "At " + stampText(at, loc)
	var held string
	switch t := m.Tenure; {
	case t != nil:
		b.Seq, b.Holder, b.HolderURL = t.Seq, printable(t.Holder), HolderURL(t.Holder)
		held = fmt.Sprintf("held by %s with %s (tenure #%d %s %s, %s)", orDash(b.Holder), tokenWords(t.Token), t.Seq,
			grantWord(*t), stampText(t.GrantedAt, loc), endedWords(*t, loc))
	case m.Previous != nil:
		t := m.Previous
		b.Holder, b.HolderURL = printable(t.Holder), HolderURL(t.Holder)
		held = "nobody held it (" + freeSince(*t, loc) + ")"
	default:
		held = "nobody held it (no tenure of this lock had been recorded by then)"
	}
	if bw := m.Blind; bw != nil {
		b.Text = fmt.Sprintf("%s the collector was blind (blind window from %s to %s", when, stampText(bw.From, loc), stampText(bw.To, loc))
		if bw.Reason != "" {
			b.Text += ": " + printable(bw.Reason)
		}
		b.Text += "); as recorded, " + held + "."
		return b
	}
	b.Text = when + ": " + held + "."
	return b
}

// freeSince says since when, and why, a lock was free after tenure t.
func freeSince(t audit.Tenure, loc *time.Location) string {
	since, who := stampText(t.EndedAt, loc), orDash(printable(t.Holder))+" with "+tokenWords(t.Token)
	switch t.End {
	case audit.EndExpired:
		return fmt.Sprintf("expired %s: the lease of %s ran out", since, who)
	case audit.EndReleased:
		return fmt.Sprintf("free since %s, when %s released it", since, who)
	}
	return fmt.Sprintf("free since %s, when the tenure of %s ended (%s)", since, who, t.End)
}

// tokenWords is "token N", or "no token".
func tokenWords(t *int64) string {
	if t == nil {
		return "no token"
	}
	return "token " + strconv.FormatInt(*t, 10)
}

// grantWord says how a tenure's start is known.
func grantWord(t audit.Tenure) string {
	if t.Observed {
		return "first seen"
	}
	return "granted"
}

// endedWords says how a tenure ended, or that it is still held.
func endedWords(t audit.Tenure, loc *time.Location) string {
	if t.Held() {
		return "still held"
	}
	return fmt.Sprintf("ended %s, %s", stampText(t.EndedAt, loc), t.End)
}
