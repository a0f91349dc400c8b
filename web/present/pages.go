package present

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/views"
)

// pageTenures is how many tenures the lock page lists at most.
const pageTenures = 100

// LockLiveID is the id of the lock page's live region, which htmx
// refreshes alone.
const LockLiveID = "lock-live"

// nearExpiryURL lists the held locks by lease left, least first.
const nearExpiryURL = "/locks?state=held&sort=margin"

// withQuery returns path with q's parameters, changed by set (an empty
// value removes the parameter).
func withQuery(path string, q url.Values, set ...string) string {
	v := url.Values{}
	for k, vs := range q {
		v[k] = slices.Clone(vs)
	}
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] == "" {
			v.Del(set[i])
		} else {
			v.Set(set[i], set[i+1])
		}
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// Overview is the overview page of o, read at r.Now (o.Now is its
// reading's, which the strips end at).
func (p Pages) Overview(r Request, o query.Overview) views.OverviewPage {
	now, loc := r.Now, r.Loc
	v := views.OverviewPage{
		Live:        views.Live{ID: "overview", URL: r.URI, Every: RefreshOverview},
		Now:         stampIn(now, loc),
		Margin:      p.marginText(),
		HeldURL:     "/locks?state=held&sort=changed",
		NearURL:     nearExpiryURL,
		FindingsURL: "/findings?" + url.Values{"from": {o.Day.From.UTC().Format(time.RFC3339)}}.Encode(),
		Counts: views.OverviewCounts{Locks: o.Counts.Locks, Held: o.Counts.Held, Free: o.Counts.Free, Expired: o.Counts.Expired,
			Heartbeats: o.Counts.Heartbeats, NearExpiry: o.Counts.NearExpiry, SourcesDown: o.Sources.Down()},
		Verdicts: verdictCounts(o.Verdicts),
		Findings: findingRows(o.Findings, loc, p.GroupExposuresUnder),
		Sources:  sourceRows(o.Sources, now, loc),
	}
	v.Held, v.StripLabel = p.heldRows(o, loc)
	v.TopWriters = topWriters(o.TopWriters)
	for _, l := range o.NearExpiry {
		v.NearExpiry = append(v.NearExpiry, p.lockRow(l, now, loc))
	}
	// The tile counts what needs a look; info findings (exposures of
	// milliseconds with every handover, rejected stale writes) beside it.
	sev := o.Severities
	v.Counts.Findings24h = sev[audit.SeverityCritical] + sev[audit.SeverityWarning]
	v.Counts.Info24h = sev[audit.SeverityInfo]
	for _, s := range []audit.Severity{audit.SeverityCritical, audit.SeverityWarning, audit.SeverityInfo} {
		v.Severities = append(v.Severities, views.SeverityCount{Severity: string(s), N: sev[s],
			URL: "/findings?" + url.Values{"severity": {string(s)}, "from": {o.Day.From.UTC().Format(time.RFC3339)}}.Encode()})
	}
	return v
}

// Locks is the locks page of pg, the locks that f (read from r.Query)
// asked for; kinds are the source kinds its filter offers, sources the
// configured sources' names.
func (p Pages) Locks(r Request, f audit.LockFilter, pg query.LockList, kinds []audit.SourceKind, sources []string) views.LocksPage {
	q, loc, now := r.Query, r.Loc, r.Now
	sortName := q.Get("sort")
	locks, hasPrev, hasNext := pg.Locks, pg.HasPrev, pg.HasNext
	v := views.LocksPage{
		Filter: views.LockFilter{
			Source:  f.Source,
			Kind:    string(f.Kind),
			Q:       f.Q,
			Class:   q.Get("class"),
			State:   string(f.State),
			Holder:  f.Holder,
			Verdict: f.Verdict,
			Sort:    sortName,
		},
		Total:        pg.Total,
		TotalAtLeast: pg.AtLeast,
		Truncated:    hasNext,
		Limit:        f.Limit,
		Now:          stampIn(now, loc),
	}
	v.Kinds, v.Verdicts, v.Sorts = names(kinds), names(verdict.Kinds), locksSorts(q, sortName)
	if len(locks) > 0 {
		if hasNext {
			v.Next = withQuery("/locks", q, "after", strconv.FormatInt(locks[len(locks)-1].ID, 10), "before", "")
		}
		if hasPrev {
			v.Prev = withQuery("/locks", q, "before", strconv.FormatInt(locks[0].ID, 10), "after", "")
		}
	}
	if f.After != 0 || f.Before != 0 {
		v.First = withQuery("/locks", q, "after", "", "before", "")
	}
	v.Sources = sources
	if f.Source != "" && !slices.Contains(v.Sources, f.Source) {
		// Keep a filter from a shared URL visible even if that source is gone.
		v.Sources = append(v.Sources, f.Source)
	}
	for _, l := range locks {
		row := p.lockRow(l.Lock, now, loc)
		row.Verdict = l.Verdict
		v.Locks = append(v.Locks, row)
	}
	return v
}

// locksSorts are the locks list's column orders, the current one marked.
func locksSorts(q url.Values, sortName string) []views.Link {
	var out []views.Link
	for _, o := range []struct{ key, label string }{{"name", "Name"}, {"changed", "Last change"}, {"margin", "Lease left"}} {
		cur := sortName == o.key || (sortName == "" && o.key == "name")
		out = append(out, views.Link{Label: o.label, Current: cur,
			URL: withQuery("/locks", q, "sort", o.key, "after", "", "before", "")})
	}
	return out
}

// names returns the names of a contract's values, in their order.
func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

func (p Pages) lockRow(l audit.Lock, now time.Time, loc *time.Location) views.LockRow {
	row := views.LockRow{
		ID:         l.ID,
		Source:     printable(l.Source),
		Name:       printable(l.Name),
		Class:      string(l.Class),
		State:      string(l.State),
		Holder:     printable(l.Holder),
		Token:      token(l.Token),
		Acquired:   stampIn(l.AcquiredAt, loc),
		Renewed:    stampAgo(l.RenewedAt, loc, now),
		Changed:    stampAgo(l.ChangedAt, loc, now),
		ExpiresIn:  expiresIn(l, now),
		LeftPct:    leftPct(l, now),
		NearExpiry: query.NearExpiry(l, now, p.RenewMargin),
	}
	if l.Holder != "" {
		row.HolderURL = HolderURL(l.Holder)
	}
	return row
}

// leftPct is the share of a held lock's lease left, 0..100, or -1.
func leftPct(l audit.Lock, now time.Time) int {
	if l.State != audit.StateHeld || l.ExpiresAt.IsZero() || l.LeaseDuration <= 0 {
		return -1
	}
	f := float64(l.ExpiresAt.Sub(now)) / float64(l.LeaseDuration)
	return int(min(1, max(0, f))*100 + 0.5)
}

// Lock shapes the lock page from what the query layer read for lq: its
// live region (the verdict, the state and the timeline) and, unless lq
// asks for that region alone, the rest (fillLockDetails).
func (p Pages) Lock(r Request, lq query.LockPageQuery, pg query.LockPage) views.LockPage {
	q, loc, w, l, now := r.Query, r.Loc, pg.Window, pg.Lock, lq.Now
	sortFindingsForTimeline(pg.Findings)
	base := fmt.Sprintf("/locks/%d", l.ID)
	keep := keepParams(q, lockPageKeep)
	windowURL := func(from, to time.Time) string {
		return withQuery(base, keep, "from", from.UTC().Format(time.RFC3339Nano), "to", to.UTC().Format(time.RFC3339Nano))
	}
	banner := atBanner(l, pg.Moment, loc)
	v := views.LockPage{
		At:   banner,
		Lock: p.lockSummary(l, loc, now),
		Timeline: buildTimeline(timelineInput{
			Lock: l.Key().String(), From: w.From, To: w.To, Now: now, Loc: loc,
			Tenures: pg.Tenures, Renewals: pg.Renewals, RenewalsFrom: pg.RenewalsFrom,
			Writes: pg.Writes, WriteBins: writeBinsOf(pg.WriteCounts, l.ID), Findings: pg.Findings,
			At: lq.At, AtSeq: banner.Seq,
			Zoom: windowURL,
			FindingHref: func(f audit.Finding) string {
				return "#finding-" + strconv.FormatInt(f.ID, 10)
			},
		}),
		FindingsTrimmed: pg.FindingsTrimmed,
		FindingsURL: "/findings?" + url.Values{"lock": {strconv.FormatInt(l.ID, 10)},
			"from": {w.From.UTC().Format(time.RFC3339Nano)}, "to": {w.To.UTC().Format(time.RFC3339Nano)}}.Encode(),
		EventFilter: views.EventFilter{Kind: string(lq.Events.Kind)},
		Window:      windowNav(base, q, keep, w, loc, now, pg.Note),
		Verdict:     verdictPanel(l, q, base, pg.Verdict, lq.Verdict, loc, now),
	}
	if w.Preset != "" {
		v.Live = views.Live{ID: LockLiveID, URL: r.URI, Every: refreshLock}
	}
	if !lq.LiveOnly {
		p.fillLockDetails(&v, r, lq, pg, banner.Seq, windowURL)
	}
	return v
}

// lockSummary is the lock page's summary of l's current state.
func (p Pages) lockSummary(l audit.Lock, loc *time.Location, now time.Time) views.LockSummary {
	return views.LockSummary{
		ID:            l.ID,
		Source:        printable(l.Source),
		Kind:          string(l.Kind),
		Name:          printable(l.Name),
		Class:         string(l.Class),
		State:         string(l.State),
		Holder:        printable(l.Holder),
		HolderURL:     holderURLOf(l.Holder),
		Token:         token(l.Token),
		LeaseDuration: duration(l.LeaseDuration),
		Acquired:      stampIn(l.AcquiredAt, loc),
		Renewed:       stampAgo(l.RenewedAt, loc, now),
		Expires:       stampIn(l.ExpiresAt, loc),
		ExpiresIn:     expiresIn(l, now),
		LeftPct:       leftPct(l, now),
		NearExpiry:    query.NearExpiry(l, now, p.RenewMargin),
		Changed:       stampAgo(l.ChangedAt, loc, now),
	}
}

// keepParams returns the parameters of q named in names that are set.
func keepParams(q url.Values, names []string) url.Values {
	keep := url.Values{}
	for _, k := range names {
		if v := q.Get(k); v != "" {
			keep.Set(k, v)
		}
	}
	return keep
}

// fillLockDetails shapes the lock page's parts outside its live region:
// the leadership health, the tenure and finding rows, and a page of events
// with its links. atSeq is the tenure current at the page's instant, zoom
// the link to a window.
func (p Pages) fillLockDetails(v *views.LockPage, r Request, lq query.LockPageQuery, pg query.LockPage, atSeq int64, zoom func(from, to time.Time) string) {
	w, loc := pg.Window, r.Loc
	v.Health = healthPanel(pg.Tenures, pg.Margins, pg.MarginsCapped)
	v.Advice = advicePanel(pg.Advice)
	for _, k := range audit.EventKinds {
		v.EventKinds = append(v.EventKinds, string(k))
	}
	shown := pg.Tenures
	if len(shown) > pageTenures {
		shown, v.TenuresTrimmed = shown[len(shown)-pageTenures:], true
	}
	v.Tenures = tenureRows(shown, atSeq, lq.Now, w.To, loc, zoom)
	v.Findings = findingRows(pg.Findings, loc, p.GroupExposuresUnder)
	events := pg.Events.Events
	for _, e := range slices.Backward(events) {
		v.Events = append(v.Events, eventRow(e, loc))
	}
	base := fmt.Sprintf("/locks/%d", pg.Lock.ID)
	pageQ := url.Values{}
	maps.Copy(pageQ, r.Query)
	if w.Preset == "" {
		// Page through the same fixed window, not one that moves with now.
		pageQ.Set("from", w.From.UTC().Format(time.RFC3339Nano))
		pageQ.Set("to", w.To.UTC().Format(time.RFC3339Nano))
	}
	if pg.Events.Older && len(events) > 0 {
		e := events[0]
		v.EventsOlder = withQuery(base, pageQ, "before", FormatCursor(e.At, e.ID)) + "#events"
	}
	if !lq.Events.Before.IsZero() {
		v.EventsNewer = withQuery(base, pageQ, "before", "") + "#events"
	}
}

// FormatCursor writes an (at, id) keyset cursor, the before of a list's
// next page.
func FormatCursor(at time.Time, id int64) string {
	return strconv.FormatInt(at.UnixNano(), 10) + "-" + strconv.FormatInt(id, 10)
}

// renewedInTenure is a tenure's last renewal as its row shows it: none
// until one comes after its grant. A seen grant carries the lease's last
// renewal, which may be older (an etcd session's keepalive from before its
// key existed): the lease runs from it, but it is not the tenure's. A tenure
// already held when the collector started shows what it read.
func renewedInTenure(t audit.Tenure) time.Time {
	if t.Observed || t.LastRenewedAt.After(t.GrantedAt) {
		return t.LastRenewedAt
	}
	return time.Time{}
}

// tenureRows are the lock page's tenure rows, newest first: atSeq is the
// tenure current at the page's instant (0: none), to the window's end, and
// zoom the link to a window.
func tenureRows(tenures []audit.Tenure, atSeq int64, now, to time.Time, loc *time.Location, zoom func(from, to time.Time) string) []views.TenureRow {
	var rows []views.TenureRow
	for _, t := range slices.Backward(tenures) {
		end := string(t.End)
		if t.Held() {
			end = "held"
		}
		stop, _ := tenureEnd(t, now, audit.MaxTime(now, to))
		pad := max(stop.Sub(t.GrantedAt)/10, 5*time.Second)
		rows = append(rows, views.TenureRow{
			Seq:           t.Seq,
			Holder:        printable(t.Holder),
			HolderURL:     holderURLOf(t.Holder),
			At:            atSeq != 0 && t.Seq == atSeq,
			Token:         token(t.Token),
			Granted:       stampIn(t.GrantedAt, loc),
			Observed:      t.Observed,
			Renewals:      t.Renewals,
			Pruned:        prunedText(t.Pruned),
			LastRenewed:   stampIn(renewedInTenure(t), loc),
			LeaseDuration: duration(t.LeaseDuration),
			Expires:       stampIn(t.ExpiresAt, loc),
			Ended:         stampIn(t.EndedAt, loc),
			End:           end,
			ZoomURL:       zoom(t.GrantedAt.Add(-pad), stop.Add(pad)),
		})
	}
	return rows
}

// lockPageKeep are the lock page's parameters that its window links and
// form keep.
var lockPageKeep = []string{"tz", "kind", "verdict", "at"}

// WindowPresets are the lock page's preset windows, by name.
var WindowPresets = []struct {
	Name string
	Span time.Duration
}{
	{"15m", 15 * time.Minute}, {"1h", time.Hour}, {"6h", 6 * time.Hour},
	{"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour},
}

// windowNav builds the lock page's window controls.
func windowNav(base string, q, keep url.Values, w query.Window, loc *time.Location, now time.Time, note query.WindowNote) views.WindowNav {
	span := w.Span()
	at := func(from, to time.Time) string {
		return withQuery(base, keep, "from", from.UTC().Format(time.RFC3339Nano), "to", to.UTC().Format(time.RFC3339Nano))
	}
	mid := w.From.Add(span / 2)
	nav := views.WindowNav{
		From:       stampIn(w.From, loc),
		To:         stampIn(w.To, loc),
		FromInput:  w.From.In(loc).Format("2006-01-02T15:04:05"),
		ToInput:    w.To.In(loc).Format("2006-01-02T15:04:05"),
		Zone:       zoneName(loc),
		Earlier:    at(w.From.Add(-span/2), w.To.Add(-span/2)),
		ZoomIn:     at(mid.Add(-span/4), mid.Add(span/4)),
		ZoomOut:    at(mid.Add(-span), mid.Add(span)),
		Custom:     w.Preset == "",
		Refreshing: w.Preset != "",
	}
	if w.To.Before(now) {
		nav.Later = at(w.From.Add(span/2), w.To.Add(span/2))
	}
	if note.Reason != "" {
		nav.Note, nav.NoteLink, nav.NoteLabel = noteText(note), at(note.Asked.From, note.Asked.To), "show the last "+note.Asked.Preset
	}
	for _, p := range WindowPresets {
		nav.Presets = append(nav.Presets, views.Link{Label: p.Name, Current: w.Preset == p.Name && note.Reason == "",
			URL: withQuery(base, keep, "window", p.Name)})
	}
	zq := url.Values{}
	maps.Copy(zq, q)
	zq.Del("before")
	localName := time.Local.String()
	if localName == "Local" || localName == "" {
		localName = "local"
	}
	nav.Zones = []views.Link{
		{Label: "UTC", URL: withQuery(base, zq, "tz", ""), Current: loc == time.UTC},
		{Label: "local", URL: withQuery(base, zq, "tz", localName), Current: loc != time.UTC},
	}
	for _, k := range lockPageKeep {
		if v := q.Get(k); v != "" {
			nav.Hidden = append(nav.Hidden, views.Field{Key: k, Value: v})
		}
	}
	return nav
}

// noteText says why the lock page shows another window than its preset's.
func noteText(note query.WindowNote) string {
	if note.Reason == query.NoteFitted {
		return fmt.Sprintf("The lock's history began %s ago, within the last %s: the window fits it.", duration(note.History), note.Asked.Preset)
	}
	return fmt.Sprintf("Nothing changed in the last %s: the window shows the lock's last change instead.", note.Asked.Preset)
}

func eventRow(e audit.Event, loc *time.Location) views.EventRow {
	return views.EventRow{
		ID:       e.ID,
		Kind:     string(e.Kind),
		At:       stampIn(e.At, loc),
		Holder:   printable(e.Holder),
		Token:    token(e.Token),
		TTL:      duration(e.TTL),
		Position: printable(e.Position),
		Inferred: e.Inferred,
		Resource: printable(e.Resource),
		Detail:   detailFields(e),
	}
}

// Findings is the findings page of page, the findings that fq (read from
// r.Query) asked for; sources are the configured sources' names.
func (p Pages) Findings(r Request, fq query.FindingsQuery, page query.FindingList, sources []string) views.FindingsPage {
	q, loc := r.Query, r.Loc
	f, findings, older := fq.Filter, page.Findings, page.Older
	v := views.FindingsPage{
		Filter: views.FindingFilter{
			Kind:     string(f.Kind),
			Severity: string(f.Severity),
			Source:   f.Source,
			Lock:     q.Get("lock"),
			Resource: f.Resource,
			Class:    q.Get("class"),
			From:     q.Get("from"),
			To:       q.Get("to"),
		},
		Truncated:  older,
		Limit:      fq.Limit,
		Severities: []string{string(audit.SeverityCritical), string(audit.SeverityWarning), string(audit.SeverityInfo)},
		Sources:    sources,
	}
	if f.Source != "" && !slices.Contains(v.Sources, f.Source) {
		v.Sources = append(v.Sources, f.Source)
	}
	if !fq.ClassGiven && !fq.Lock.IsZero() {
		v.Filter.Class = "all" // a named lock's findings, whatever its class
	}
	for _, k := range audit.FindingKinds {
		v.Kinds = append(v.Kinds, string(k))
	}
	under := p.GroupExposuresUnder
	if f.Kind == audit.FindingExposure {
		under = 0 // asked for exposures: each on its own row
	}
	v.Findings = findingRows(findings, loc, under)
	if older && len(findings) > 0 {
		v.Older = withQuery("/findings", q, "before", FormatCursor(findings[0].At, findings[0].ID))
	}
	if !f.Before.IsZero() {
		v.First = withQuery("/findings", q, "before", "")
	}
	return v
}

// Sources is the sources page of s: each source's health and its blind
// windows since s.Since, newest first.
func Sources(r Request, s query.Sources) views.SourcesPage {
	loc, now := r.Loc, r.Now
	v := views.SourcesPage{
		Live:    views.Live{ID: "sources-live", URL: r.URI, Every: RefreshOverview},
		Now:     stampIn(now, loc),
		Sources: sourceRows(s, now, loc),
		Since:   stampIn(s.Since, loc),
	}
	for _, b := range slices.Backward(s.Blinds) {
		v.Blinds = append(v.Blinds, views.BlindRow{
			Source:   printable(b.Source),
			From:     stampIn(b.From, loc),
			To:       stampIn(b.To, loc),
			Duration: duration(b.To.Sub(b.From)),
			Reason:   printable(b.Reason),
			Locks:    b.Locks,
			FindingsURL: "/findings?" + url.Values{"kind": {string(audit.FindingBlindWindow)}, "source": {b.Source}, "class": {"all"},
				"from": {b.From.UTC().Format(time.RFC3339Nano)}, "to": {b.To.UTC().Format(time.RFC3339Nano)}}.Encode(),
		})
	}
	return v
}

// sourceRows describes every source of v: its health, cursor, lock count
// and blind windows since v.Since.
func sourceRows(v query.Sources, now time.Time, loc *time.Location) []views.SourceRow {
	var rows []views.SourceRow
	for _, src := range v.Statuses {
		row := views.SourceRow{
			Name:       printable(src.Name),
			Kind:       string(src.Kind),
			State:      src.State,
			LastEvent:  stampAgo(src.LastEventAt, loc, now),
			BlindSince: stampAgo(src.BlindSince, loc, now),
			Blinds:     src.Blinds,
			Degraded:   printable(src.Degraded),
			Error:      printable(src.Error),
			Locks:      src.Locks,
			LocksURL:   "/locks?" + url.Values{"source": {src.Name}, "class": {"all"}}.Encode(),
			BlindsURL: "/findings?" + url.Values{"kind": {string(audit.FindingBlindWindow)}, "source": {src.Name}, "class": {"all"},
				"from": {v.Since.UTC().Format(time.RFC3339)}}.Encode(),
		}
		if !src.LagAt.IsZero() {
			if row.Lag = duration(src.Lag); row.Lag == "" {
				row.Lag = "0s"
			}
			row.LagAt = stampAgo(src.LagAt, loc, now)
		}
		if src.HasCursor {
			row.Cursor = printable(src.Cursor.Position)
			row.CursorAt = stampAgo(src.Cursor.At, loc, now)
		}
		rows = append(rows, row)
	}
	return rows
}

func findingRow(f audit.Finding, loc *time.Location) views.FindingRow {
	lock := f.Lock.String()
	if f.Lock.Source == "" && f.Lock.Name == "" {
		lock = "#" + strconv.FormatInt(f.LockID, 10)
	}
	holders := make([]string, len(f.Holders))
	for i, h := range f.Holders {
		holders[i] = printable(h)
	}
	row := views.FindingRow{
		ID:       f.ID,
		LockID:   f.LockID,
		Lock:     printable(lock),
		Kind:     string(f.Kind),
		Severity: string(f.Severity),
		At:       stampIn(f.At, loc),
		Until:    stampIn(f.Until, loc),
		Summary:  printable(f.Summary),
		Holders:  strings.Join(holders, ", "),
		Resource: printable(f.Resource),
	}
	tokens := make([]string, len(f.Tokens))
	for i, t := range f.Tokens {
		tokens[i] = strconv.FormatInt(t, 10)
	}
	row.Tokens = strings.Join(tokens, ", ")
	if !f.Until.IsZero() && f.Until.After(f.At) {
		row.Duration = duration(f.Until.Sub(f.At))
	}
	row.TimelineURL = FindingTimelineURL(f)
	return row
}

// FindingTimelineURL is f's lock page, its timeline centred on f with as
// much context either side as f lasts (a minute at least), scrolled to f.
func FindingTimelineURL(f audit.Finding) string {
	until := f.Until
	if until.IsZero() || !until.After(f.At) {
		until = f.At
	}
	pad := max(until.Sub(f.At), time.Minute)
	return fmt.Sprintf("/locks/%d?", f.LockID) + url.Values{
		"from": {f.At.Add(-pad).UTC().Format(time.RFC3339Nano)},
		"to":   {until.Add(pad).UTC().Format(time.RFC3339Nano)},
	}.Encode() + "#finding-" + strconv.FormatInt(f.ID, 10)
}

// detailFields renders an event's detail as key=value pairs in key order.
// Strings appear as they are; other values as JSON.
func detailFields(e audit.Event) []views.Field {
	fields := make([]views.Field, 0, len(e.Detail))
	for _, k := range slices.Sorted(maps.Keys(e.Detail)) {
		var v string
		switch x := e.Detail[k].(type) {
		case string:
			v = x
		default:
			b, err := json.Marshal(x)
			if err != nil {
				v = fmt.Sprint(x)
			} else {
				v = string(b)
			}
		}
		fields = append(fields, views.Field{Key: printable(k), Value: printable(v)})
	}
	return fields
}

// prunedText describes what retention removed of a tenure's renewals.
func prunedText(p *audit.RenewalSummary) string {
	if p == nil {
		return ""
	}
	s := strconv.FormatInt(p.Renewals, 10) + " pruned"
	if p.MinMarginRatio != nil {
		s += ", least margin " + strconv.Itoa(int(math.Round(*p.MinMarginRatio*100))) + "%"
	}
	return s
}

// marginText is the renew margin as a percentage, e.g. "25%".
func (p Pages) marginText() string {
	return strconv.Itoa(int(p.RenewMargin*100+0.5)) + "%"
}

// expiresIn says how long a held lock's lease has left, or how long ago it ran out.
func expiresIn(l audit.Lock, now time.Time) string {
	if l.State != audit.StateHeld || l.ExpiresAt.IsZero() {
		return ""
	}
	left := l.ExpiresAt.Sub(now)
	if left < 0 {
		return duration(-left) + " ago"
	}
	return duration(left)
}

func token(t *int64) string {
	if t == nil {
		return ""
	}
	return strconv.FormatInt(*t, 10)
}

// duration formats d compactly: milliseconds under a minute, seconds above.
func duration(d time.Duration) string {
	switch {
	case d == 0:
		return ""
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
