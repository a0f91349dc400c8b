package sqlite

// The column lists of the store's reads, in the order of rowcodec's scan
// destinations.

// tenureTables are the tenures (aliased t) with what retention pruned of
// their renewals (summaryColumns).
const tenureTables = `tenures t LEFT JOIN renewal_summaries rs ON rs.lock_id = t.lock_id AND rs.seq = t.seq`

// summaryColumns are the columns SummaryDest scans, as one JSON array (NULL
// when nothing was pruned) so that one destination takes them.
const summaryColumns = `CASE WHEN rs.renewals IS NULL THEN NULL
	ELSE json_array(rs.renewals, rs.first_at, rs.last_at, rs.min_margin_permille) END`

// lockColumns are the columns rowcodec.LockDest scans, from locks aliased l.
const lockColumns = `l.id, l.source, l.kind, l.name, l.class, l.state, l.holder, l.token,
	l.acquired_at, l.renewed_at, l.expires_at, l.lease_duration_ms, l.changed_at`

// eventColumns are the columns rowcodec.EventDest scans, from eventTables. A compact
// renewal (one with a seq) takes its holder and token from its tenure, and
// its margin and renewal time from their columns (journal.go's eventArgs).
const eventColumns = `e.id, e.lock_id, e.kind, e.at, coalesce(et.holder, e.holder),
	CASE WHEN e.seq IS NULL THEN e.token ELSE et.token END, e.ttl_ms, e.position,
	e.inferred, e.resource, e.request_id, e.detail, coalesce(e.seq, 0), e.margin_permille, e.renewed_at`

// eventTables are the tables of eventColumns; index is the events index to
// read, or "" for the planner's choice.
func eventTables(index string) string {
	from := `events e`
	if index != "" {
		from += ` INDEXED BY ` + index
	}
	return from + ` LEFT JOIN tenures et ON e.seq IS NOT NULL AND et.lock_id = e.lock_id AND et.seq = e.seq`
}

// tenureColumns are the columns rowcodec.TenureDest scans, from tenures aliased t.
const tenureColumns = `t.lock_id, t.seq, t.holder, t.token, t.granted_at, t.observed, t.position,
	t.renewals, t.last_renewed_at, t.lease_duration_ms, t.expires_at, t.ended_at, t.end_reason`

// findingColumns are the columns rowcodec.FindingDest scans, from findings aliased f
// joined with locks aliased l; findingColumnsOf, from findings alone, for one
// lock, whose source and name are the query's first two arguments.
const (
	findingColumns   = `f.id, f.lock_id, l.source, l.name, ` + findingFields
	findingColumnsOf = `f.id, f.lock_id, ?, ?, ` + findingFields
	findingFields    = `f.kind, f.severity, f.at, f.until, f.summary, f.tokens, f.holders, f.resource`
)
