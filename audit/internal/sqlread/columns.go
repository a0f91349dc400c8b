package sqlread

import (
	"slices"

	"github.com/leasewatch/leasewatch/audit"
)

// The column lists of the stores' reads, in the order of rowcodec's scan
// destinations. Both stores' journals read through them too.

// TenureTables are the tenures (aliased t) with their locks' rows (lr,
// for TenureColumns) and what retention pruned of their renewals
// (Engine.SummaryColumns).
const TenureTables = `tenures t` + heldJoin + summaryJoin

// heldJoin joins the tenures aliased t to their locks' rows, aliased lr,
// where TenureColumns reads a held tenure's renewals.
const heldJoin = ` JOIN locks lr ON lr.id = t.lock_id`

// summaryJoin joins the tenures aliased t to what retention pruned of their
// renewals, aliased rs.
const summaryJoin = ` LEFT JOIN renewal_summaries rs ON rs.lock_id = t.lock_id AND rs.seq = t.seq`

// HolderIndex is the index of a holder's tenures across locks, by grant
// time (migrations sqlite/0015 and postgres/0007).
const HolderIndex = "tenures_holder_granted"

// LockColumns are the columns rowcodec.LockDest scans, from locks aliased l.
const LockColumns = `l.id, l.source, l.kind, l.name, l.class, l.state, l.holder, l.token,
	l.acquired_at, l.renewed_at, l.expires_at, l.lease_duration_ms, l.changed_at`

// EventColumns are the columns rowcodec.EventDest scans, from EventTables. A
// compact renewal (one with a seq) takes its holder and token from its
// tenure, and its margin and renewal time from their columns.
const EventColumns = `e.id, e.lock_id, e.kind, e.at, coalesce(et.holder, e.holder),
	CASE WHEN e.seq IS NULL THEN e.token ELSE et.token END, e.ttl_ms, e.position,
	e.inferred, e.resource, e.request_id, e.detail, coalesce(e.seq, 0), e.margin_permille, e.renewed_at`

// TenureJoin joins the events aliased e to the tenures of compact renewals,
// aliased et: the plain join, for an Engine without a TenureJoin.
const TenureJoin = ` LEFT JOIN tenures et ON e.seq IS NOT NULL AND et.lock_id = e.lock_id AND et.seq = e.seq`

// EventTables are the tables of EventColumns: the events of from (events,
// or an Engine.Timeline) aliased e, read through hint (an Engine.Hint, or
// ""), with the tenures of compact renewals.
func EventTables(from, hint string) string { return from + ` e` + hint + TenureJoin }

// eventTables are EventTables through the engine's TenureJoin.
func (e Engine) eventTables(from, hint string) string {
	join := e.TenureJoin
	if join == "" {
		join = TenureJoin
	}
	return from + ` e` + hint + join
}

// eventTablesOf are eventTables for events of rare kinds only (EventIndex),
// from the events table, or of any, from the timeline.
// Only renewals are stored compact, so events of another kind join no
// tenure: PostgreSQL's generic plan, costed for an average lock, would
// otherwise pair each of a busy lock's events with all its tenures (its
// 1,000 newest grants: 264 ms, against 3 ms without the join).
func (e Engine) eventTablesOf(rare bool, hint string) string {
	if !rare {
		return e.eventTables(e.timeline(), hint)
	}
	// One row of nothing in place of a tenure: a constant-false join with
	// the tenures would still scan them per event on SQLite.
	return `events e` + hint + ` CROSS JOIN (SELECT CAST(NULL AS TEXT) AS holder, CAST(NULL AS BIGINT) AS token) et`
}

// TenureColumns are the columns rowcodec.TenureDest scans, from tenures
// aliased t joined to their locks' rows aliased lr (heldJoin). A sync round
// writes a held tenure's renewals to its lock's row alone (SQLite migration
// 0027, PostgreSQL 0017), so where the lock row counts more renewals of the
// tenure than the tenure's row, its renewal columns are the tenure's.
const TenureColumns = `t.lock_id, t.seq, t.holder, t.token, t.granted_at, t.observed, t.position,
	CASE WHEN ` + renewedOnLock + ` THEN lr.renewals ELSE t.renewals END,
	CASE WHEN ` + renewedOnLock + ` THEN lr.renewed_at ELSE t.last_renewed_at END,
	CASE WHEN ` + renewedOnLock + ` THEN lr.lease_duration_ms ELSE t.lease_duration_ms END,
	CASE WHEN ` + renewedOnLock + ` THEN lr.expires_at ELSE t.expires_at END,
	t.ended_at, t.end_reason`

// renewedOnLock holds where a tenure's lock row has renewals of it that its
// own row has not.
const renewedOnLock = `lr.renewed_seq = t.seq AND lr.renewals > t.renewals`

// findingFields are the columns rowcodec.FindingDest scans after the
// finding's id, lock id and lock key, from findings aliased f.
const findingFields = `f.kind, f.severity, f.at, f.until, f.summary, f.tokens, f.holders, f.resource`

// The indexes of a lock's events: its timeline (which on SQLite carries
// each event's kind, so that a kind among others is told apart without
// reading rows), and the partial index of every kind but renewals, whose
// condition (NotRenewal) a query must repeat for the planner to use it.
const (
	TimelineIndex = "events_lock_at"
	RareKindIndex = "events_lock_kind_at"
	// WriteIndex is RareKindIndex with the columns a write report's
	// reader wants (WriteEvents), on SQLite: there, a lock's write reports
	// are read from the index alone.
	WriteIndex = "events_lock_writes"
)

// EventIndex names the index for a lock's events, rare when they are of
// kinds other than renew only. An engine that plans without statistics may
// walk a lock's whole timeline and test each row's kind; a rare kind among
// millions of renewals must be one range of the partial index.
func EventIndex(rare bool) string {
	if rare {
		return RareKindIndex
	}
	return TimelineIndex
}

// Kinds returns the kinds f selects, nil for every kind, and whether they
// are rare: none of them renew.
func Kinds(f audit.EventFilter) (kinds []audit.EventKind, rare bool) {
	kinds = f.Kinds
	if f.Kind != "" {
		kinds = []audit.EventKind{f.Kind}
	}
	return kinds, len(kinds) > 0 && !slices.Contains(kinds, audit.EventRenew)
}

// NotRenewal is the condition of the partial index events_lock_kind_at.
func NotRenewal(col string) string { return col + " <> 'renew'" }
