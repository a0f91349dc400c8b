// Package verdict answers, per lock and over a window of its history,
// whether its fencing guarantee held: the questions every lock prompts
// (what identifies each acquisition, which resource checks it, what landed
// after a lease was gone), answered from the tenures, writes, findings and
// blind windows leasewatch has recorded.
//
// Judge is pure: it works only on the Facts it is given, so the same
// history always gives the same verdict. Load gathers those facts from a
// store (FactReader: the few audit.Store methods it calls), its reads side
// by side (errgroup). It imports only the standard library, errgroup and
// audit.
package verdict

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Kind is a lock's verdict (contract).
type Kind string

// Verdicts, from worst to best.
const (
	// Unsafe: a write landed that fencing should have stopped, or holders
	// overlapped or tokens went back while a resource accepted writes.
	Unsafe Kind = "unsafe"
	// Unverified: nothing shows whether the tokens are checked (no write
	// reports, no tokens at all), or the collector was blind for part of
	// the window.
	Unverified Kind = "unverified"
	// Fenced: every reported write carried the newest token or was
	// rejected, with no overlap and no regression.
	Fenced Kind = "fenced"
	// Efficiency: the lock was declared to avoid duplicate work only, so
	// unfenced writes are expected: duplicates are possible by design.
	Efficiency Kind = "efficiency"
)

// Kinds lists every verdict in a stable order, the worst first.
var Kinds = []Kind{Unsafe, Unverified, Fenced, Efficiency}

// Valid reports whether k is a known verdict.
func (k Kind) Valid() bool { return slices.Contains(Kinds, k) }

// Purpose is what a lock is for, as configured per source and lock pattern
// (contract: purpose: correctness | efficiency).
type Purpose string

// Purposes. The zero value is PurposeCorrectness.
const (
	PurposeCorrectness Purpose = "correctness"
	PurposeEfficiency  Purpose = "efficiency"
)

// Valid reports whether p is a known purpose ("" is PurposeCorrectness).
func (p Purpose) Valid() bool {
	return p == "" || p == PurposeCorrectness || p == PurposeEfficiency
}

// Window is the closed interval a verdict covers.
type Window struct {
	From, To time.Time
}

// Facts are what a verdict is judged from: one lock's recorded history
// over a window.
type Facts struct {
	Lock    audit.Lock
	Window  Window
	Purpose Purpose
	// Tenures overlap the window, in grant order.
	Tenures []audit.Tenure
	// Findings of the lock overlap the window, in time order.
	Findings []audit.Finding
	// Stale counts the lock's stale_write findings in the window per
	// resource, when Findings leaves them out (Load; LoadListed lists them).
	Stale []audit.ResourceFindings
	// Writes are the resources' totals within the window.
	Writes []audit.ResourceWrites
	// Blind are the blind windows of the lock's source that overlap the
	// window.
	Blind []audit.BlindWindow
	// AcceptedUnder counts, per finding ID of an overlap, a token
	// regression or a token reuse, the writes a resource accepted while it
	// lasted: over an overlap's interval, and over the tenure that a
	// regressed or reused token was granted to.
	AcceptedUnder map[int64]int
}

// Verdict is one lock's answer over a window, with the reasons for it and
// the figures behind them.
type Verdict struct {
	Lock    audit.Lock
	Window  Window
	Purpose Purpose
	Kind    Kind
	// Reasons say why, the ones that decide the verdict first.
	Reasons []Reason

	// Grants counts the tenures held at some time in the window (granted
	// in it or before); Tokened, those of them that carried a fencing
	// token.
	Grants, Tokened int
	// Resources are the resources that reported writes, or that findings
	// name, by name.
	Resources []Resource
	// Overlaps counts the overlaps of two holders in the window, and
	// OverlapTime adds up how long they lasted.
	Overlaps    int
	OverlapTime time.Duration
	// Blind is how much of the window the source's collector could not
	// see its backend.
	Blind time.Duration
	// LongestGap is the longest time from a holder's end (or the end of its
	// lease) to the next grant: how long work was in flight or stalled.
	// GapAfter is the tenure it follows; zero Seq when there was none.
	LongestGap time.Duration
	GapAfter   audit.Tenure
	// Notes say what the verdict was not judged from, in words for people.
	Notes []string
}

// TokenShare is the share of the window's grants that carried a token, 0
// to 1; 0 when there were none.
func (v Verdict) TokenShare() float64 {
	if v.Grants == 0 {
		return 0
	}
	return float64(v.Tokened) / float64(v.Grants)
}

// BlindShare is the share of the window the collector was blind, 0 to 1.
func (v Verdict) BlindShare() float64 {
	span := v.Window.To.Sub(v.Window.From)
	if span <= 0 {
		return 0
	}
	return min(1, float64(v.Blind)/float64(span))
}

// Resource is what one protected resource did for the lock in the window.
type Resource struct {
	Resource string
	Accepted int
	Rejected int
	// Untokened counts the accepted writes that carried no token.
	Untokened int
	// Stale counts the stale writes it stopped; Unfenced, the writes from
	// an ended or superseded tenure it accepted.
	Stale, Unfenced int
	// MaxExposure and TotalExposure are its exposure windows: from a grant
	// to the first write that showed it the new token.
	MaxExposure, TotalExposure time.Duration
	LastReport                 time.Time
}

// ReasonCode names a reason (contract).
type ReasonCode string

// Reason codes.
const (
	ReasonUnfencedWrite    ReasonCode = "unfenced_write"    // unsafe: a write from an ended or superseded tenure landed
	ReasonUntokenedWrite   ReasonCode = "untokened_write"   // unsafe: a resource accepted writes that carried no token
	ReasonOverlapWrites    ReasonCode = "overlap_writes"    // unsafe: writes were accepted while two holders overlapped
	ReasonRegressionWrites ReasonCode = "regression_writes" // unsafe: writes were accepted under a regressed or reused token
	ReasonZombieWrites     ReasonCode = "zombie_writes"     // unsafe: a zombie holder's writes were accepted after its tenure ended
	ReasonUngrantedToken   ReasonCode = "ungranted_token"   // unsafe: a resource accepted a write under a token no grant had
	ReasonNoTokens         ReasonCode = "no_tokens"         // unverified: no grant carried a token
	ReasonSomeUntokened    ReasonCode = "some_untokened"    // unverified: some grants carried no token
	ReasonNoWrites         ReasonCode = "no_writes"         // unverified: no resource reported a write
	ReasonNoGrants         ReasonCode = "no_grants"         // unverified: nobody held the lock and nothing was written in the window
	ReasonBlind            ReasonCode = "blind"             // unverified: the collector was blind for part of the window
	ReasonOverlap          ReasonCode = "overlap"           // warning: holders overlapped, but no write was accepted meanwhile
	ReasonRegression       ReasonCode = "regression"        // warning: a token went back or was reused, but nothing was written under it
	ReasonZombieHolder     ReasonCode = "zombie_holder"     // warning: a holder acted under an ended tenure, but no write of it was accepted
	ReasonStaleStopped     ReasonCode = "stale_stopped"     // info: fencing rejected writes from ended tenures
	ReasonEfficiency       ReasonCode = "efficiency"        // efficiency: declared to avoid duplicate work only
	ReasonAllFenced        ReasonCode = "all_fenced"        // fenced: every reported write carried the newest token or was rejected
)

// Reason is one thing that decided or qualifies a verdict.
type Reason struct {
	Code ReasonCode
	// Decides says the reason sets the verdict; the others qualify it.
	Decides bool
	Text    string
	// Findings are the IDs of the findings behind it, in time order.
	Findings []int64
	// Count is how many findings are behind it: len(Findings), or more
	// where they were counted and not listed (Facts.Stale).
	Count int
	// Resource, when set, is the resource it is about: its writes are the
	// evidence.
	Resource string
}

// Judge gives the verdict of f.
func Judge(f Facts) Verdict {
	v := Verdict{Lock: f.Lock, Window: f.Window, Purpose: f.Purpose}
	if v.Purpose == "" {
		v.Purpose = PurposeCorrectness
	}
	v.grants(f)
	v.resources(f)
	v.Blind = blindTime(f.Blind, f.Window)
	v.longestGap(f.Tenures)

	unsafe := v.unsafeReasons(f)
	unverified := v.unverifiedReasons()
	qualifying := v.qualifyingReasons(f)
	switch {
	case v.Purpose == PurposeEfficiency:
		v.Kind = Efficiency
		v.Reasons = append([]Reason{{Code: ReasonEfficiency, Decides: true,
			Text: "declared to avoid duplicate work only: writes are not fenced, so duplicates are possible by design"}}, undecided(unsafe, unverified, qualifying)...)
	case len(unsafe) > 0:
		v.Kind, v.Reasons = Unsafe, append(unsafe, undecided(unverified, qualifying)...)
	case len(unverified) > 0:
		v.Kind, v.Reasons = Unverified, append(unverified, qualifying...)
	default:
		v.Kind = Fenced
		n := 0
		for _, r := range v.Resources {
			n += r.Accepted + r.Rejected
		}
		v.Reasons = append([]Reason{{Code: ReasonAllFenced, Decides: true,
			Text: fmt.Sprintf("every reported write (%d) carried the newest token or was rejected, with no overlap and no token regression", n)}}, qualifying...)
	}
	for i := range v.Reasons {
		v.Reasons[i].Count = max(v.Reasons[i].Count, len(v.Reasons[i].Findings))
	}
	return v
}

// undecided joins reason lists that do not decide the verdict they are
// listed under.
func undecided(lists ...[]Reason) []Reason {
	var out []Reason
	for _, l := range lists {
		for _, r := range l {
			r.Decides = false
			out = append(out, r)
		}
	}
	return out
}

// grants counts the tenures held in the window, and those with a token.
func (v *Verdict) grants(f Facts) {
	for _, t := range f.Tenures {
		if t.GrantedAt.After(f.Window.To) || !t.Held() && t.EndedAt.Before(f.Window.From) {
			continue
		}
		v.Grants++
		if t.Token != nil {
			v.Tokened++
		}
	}
}

// resources merges the write totals with the findings that name a
// resource, and counts the overlaps.
func (v *Verdict) resources(f Facts) {
	byName := make(map[string]*Resource)
	get := func(name string) *Resource {
		r, ok := byName[name]
		if !ok {
			r = &Resource{Resource: name}
			byName[name] = r
		}
		return r
	}
	for _, w := range f.Writes {
		r := get(w.Resource)
		r.Accepted, r.Rejected, r.Untokened, r.LastReport = w.Accepted, w.Rejected, w.Untokened, w.LastAt
	}
	for _, c := range f.Stale {
		get(c.Resource).Stale += c.N
	}
	for _, fd := range f.Findings {
		switch fd.Kind {
		case audit.FindingStaleWrite:
			get(fd.Resource).Stale++
		case audit.FindingUnfencedWrite:
			get(fd.Resource).Unfenced++
		case audit.FindingUngrantedToken:
			get(fd.Resource) // listed, as its reason names it
		case audit.FindingExposure:
			r, d := get(fd.Resource), span(fd, f.Window)
			r.MaxExposure, r.TotalExposure = max(r.MaxExposure, d), r.TotalExposure+d
		case audit.FindingOverlap:
			v.Overlaps++
			v.OverlapTime += span(fd, f.Window)
		}
	}
	for _, r := range byName {
		v.Resources = append(v.Resources, *r)
	}
	slices.SortFunc(v.Resources, func(a, b Resource) int { return cmp.Compare(a.Resource, b.Resource) })
}

// span is how long a finding's interval lasted within the window.
func span(fd audit.Finding, w Window) time.Duration {
	if fd.Until.IsZero() {
		return 0
	}
	from, to := audit.MaxTime(fd.At, w.From), audit.MinTime(fd.Until, w.To)
	return max(0, to.Sub(from))
}

// blindTime is how much of the window the blind windows cover, each
// instant counted once.
func blindTime(blinds []audit.BlindWindow, w Window) time.Duration {
	bs := slices.Clone(blinds)
	slices.SortFunc(bs, func(a, b audit.BlindWindow) int { return a.From.Compare(b.From) })
	var total time.Duration
	var reach time.Time // the end of what has been counted
	for _, b := range bs {
		from, to := audit.MaxTime(audit.MaxTime(b.From, w.From), reach), audit.MinTime(b.To, w.To)
		if to.After(from) {
			total += to.Sub(from)
			reach = to
		}
	}
	return total
}

// longestGap finds the longest wait from a tenure's end to the next grant.
func (v *Verdict) longestGap(tenures []audit.Tenure) {
	for i := 1; i < len(tenures); i++ {
		prev := tenures[i-1]
		end := prev.EndedAt
		if prev.End == audit.EndSuperseded && !prev.ExpiresAt.IsZero() {
			end = prev.ExpiresAt
		}
		if end.IsZero() {
			continue
		}
		if gap := tenures[i].GrantedAt.Sub(end); gap > v.LongestGap {
			v.LongestGap, v.GapAfter = gap, prev
		}
	}
}

// unsafeReasons are the reasons that make a lock unsafe.
func (v *Verdict) unsafeReasons(f Facts) []Reason {
	var out []Reason
	unfenced := byResource(f.Findings, audit.FindingUnfencedWrite)
	ungranted := byResource(f.Findings, audit.FindingUngrantedToken)
	for _, r := range v.Resources {
		if ids := unfenced[r.Resource]; len(ids) > 0 {
			out = append(out, Reason{Code: ReasonUnfencedWrite, Decides: true, Resource: r.Resource, Findings: ids,
				Text: fmt.Sprintf("%s accepted %s from an ended or superseded tenure", r.Resource, writes(len(ids)))})
		}
		if ids := ungranted[r.Resource]; len(ids) > 0 {
			out = append(out, Reason{Code: ReasonUngrantedToken, Decides: true, Resource: r.Resource, Findings: ids,
				Text: fmt.Sprintf("%s accepted %s under a token no grant of the lock had: its fencing takes that token for the newest", r.Resource, writes(len(ids)))})
		}
		if r.Untokened > 0 && v.Tokened > 0 {
			out = append(out, Reason{Code: ReasonUntokenedWrite, Decides: true, Resource: r.Resource,
				Text: fmt.Sprintf("%s accepted %s that carried no token, so it does not check the lock's tokens", r.Resource, writes(r.Untokened))})
		}
	}
	if ids := under(f, true, audit.FindingOverlap); len(ids) > 0 {
		out = append(out, Reason{Code: ReasonOverlapWrites, Decides: true, Findings: ids,
			Text: fmt.Sprintf("writes were accepted while two holders overlapped (%s)", times(len(ids)))})
	}
	if ids := under(f, true, audit.FindingTokenRegression, audit.FindingTokenReuse); len(ids) > 0 {
		out = append(out, Reason{Code: ReasonRegressionWrites, Decides: true, Findings: ids,
			Text: fmt.Sprintf("writes were accepted under a token that went back or was reused (%s)", times(len(ids)))})
	}
	if zombies, ids := zombieWrites(f, true); len(ids) > 0 {
		out = append(out, Reason{Code: ReasonZombieWrites, Decides: true, Findings: ids,
			Text: fmt.Sprintf("a zombie holder's writes were accepted after its tenure ended (%s, %s)", zombieHolders(zombies), writes(len(ids)-zombies))})
	}
	return out
}

// zombieWrites returns the zombie_holder findings whose zombie had a write
// accepted (an unfenced_write under its token, from its tenure's end on),
// with the IDs of those writes' findings too; or, with accepted false, those
// with none. zombies counts the zombie findings among ids.
func zombieWrites(f Facts, accepted bool) (zombies int, ids []int64) {
	for _, z := range f.Findings {
		if z.Kind != audit.FindingZombieHolder || len(z.Tokens) == 0 {
			continue
		}
		var landed []int64
		for _, w := range f.Findings {
			if w.Kind == audit.FindingUnfencedWrite && len(w.Tokens) > 0 && w.Tokens[0] == z.Tokens[0] && !w.At.Before(z.At) {
				landed = append(landed, w.ID)
			}
		}
		if (len(landed) > 0) == accepted {
			zombies++
			ids = append(append(ids, z.ID), landed...)
		}
	}
	slices.Sort(ids)
	return zombies, slices.Compact(ids)
}

func zombieHolders(n int) string {
	if n == 1 {
		return "1 zombie"
	}
	return fmt.Sprintf("%d zombies", n)
}

// unverifiedReasons are the reasons that leave a lock unverified.
func (v *Verdict) unverifiedReasons() []Reason {
	var out []Reason
	reported := 0
	for _, r := range v.Resources {
		reported += r.Accepted + r.Rejected
	}
	switch {
	case v.Grants == 0 && reported == 0:
		out = append(out, Reason{Code: ReasonNoGrants, Decides: true, Text: "nobody held the lock and no resource reported a write in the window"})
	case v.Grants > 0 && v.Tokened == 0:
		out = append(out, Reason{Code: ReasonNoTokens, Decides: true,
			Text: "no grant carried a fencing token: the lock is a hint, not a guarantee"})
	case v.Tokened < v.Grants:
		out = append(out, Reason{Code: ReasonSomeUntokened, Decides: true,
			Text: fmt.Sprintf("%d of %d grants carried no fencing token", v.Grants-v.Tokened, v.Grants)})
	}
	if reported == 0 && v.Tokened > 0 {
		out = append(out, Reason{Code: ReasonNoWrites, Decides: true,
			Text: "the lock has tokens, but no resource reported a write: nobody knows whether anything checks them"})
	}
	if v.Blind > 0 {
		out = append(out, Reason{Code: ReasonBlind, Decides: true,
			Text: fmt.Sprintf("the collector was blind for %.1f%% of the window (%s)", 100*v.BlindShare(), v.Blind.Round(time.Millisecond))})
	}
	return out
}

// qualifyingReasons are the warnings and notes that do not decide a
// verdict on their own.
func (v *Verdict) qualifyingReasons(f Facts) []Reason {
	var out []Reason
	if ids := under(f, false, audit.FindingOverlap); len(ids) > 0 {
		out = append(out, Reason{Code: ReasonOverlap, Findings: ids,
			Text: fmt.Sprintf("two holders overlapped %s, but no resource accepted a write meanwhile", times(len(ids)))})
	}
	if ids := under(f, false, audit.FindingTokenRegression, audit.FindingTokenReuse); len(ids) > 0 {
		out = append(out, Reason{Code: ReasonRegression, Findings: ids,
			Text: fmt.Sprintf("a token went back or was reused %s, but no write was accepted under it", times(len(ids)))})
	}
	if zombies, ids := zombieWrites(f, false); len(ids) > 0 {
		out = append(out, Reason{Code: ReasonZombieHolder, Findings: ids,
			Text: fmt.Sprintf("a holder still acted under an ended tenure (%s), but no write of it was accepted", zombieHolders(zombies))})
	}
	stale := byResource(f.Findings, audit.FindingStaleWrite)
	for _, r := range v.Resources {
		if r.Stale > 0 {
			out = append(out, Reason{Code: ReasonStaleStopped, Resource: r.Resource, Findings: stale[r.Resource], Count: r.Stale,
				Text: fmt.Sprintf("%s rejected %s from an ended or superseded tenure: fencing stopped them", r.Resource, writes(r.Stale))})
		}
	}
	return out
}

// byResource collects the IDs of the findings of one kind per resource.
func byResource(findings []audit.Finding, kind audit.FindingKind) map[string][]int64 {
	out := make(map[string][]int64)
	for _, fd := range findings {
		if fd.Kind == kind {
			out[fd.Resource] = append(out[fd.Resource], fd.ID)
		}
	}
	return out
}

// under returns the IDs of the findings of the kinds given with (accepted)
// or without writes accepted under them.
func under(f Facts, accepted bool, kinds ...audit.FindingKind) []int64 {
	var ids []int64
	for _, fd := range f.Findings {
		if slices.Contains(kinds, fd.Kind) && (f.AcceptedUnder[fd.ID] > 0) == accepted {
			ids = append(ids, fd.ID)
		}
	}
	return ids
}

func writes(n int) string {
	if n == 1 {
		return "1 write"
	}
	return fmt.Sprintf("%d writes", n)
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// PurposeRule declares what the locks a selector picks are for.
type PurposeRule struct {
	audit.Selector
	Purpose Purpose
}

// Purposes are the configured purpose rules.
type Purposes []PurposeRule

// For returns the purpose of lock name of source: that of the most specific
// rule that matches it (audit.Selector.Compare; the earlier on a tie), and
// PurposeCorrectness when none does.
func (ps Purposes) For(source, name string) Purpose {
	best := -1
	for i, r := range ps {
		if r.Matches(source, name) && (best < 0 || r.Selector.Compare(ps[best].Selector) > 0) {
			best = i
		}
	}
	if best < 0 || ps[best].Purpose == "" {
		return PurposeCorrectness
	}
	return ps[best].Purpose
}
