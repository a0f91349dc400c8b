package postgres

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
)

// Renewals apart (migration 0003): a compact renewal, one that names its
// tenure and carries nothing but its times, TTL, margin, position and
// detail, is stored in the renewals table, partitioned by ranges of ids;
// every other event in events. Both read as one through the view timeline.
// The rows a store writes and copies are events rows of the logical schema
// (storecopy's columns, in eventColumns' order), split by renewalRow.

// DefaultRenewalSpan is the ids one partition of renewals covers unless
// Options.RenewalSpan says otherwise: about 300 MB of renewals.
const DefaultRenewalSpan = 1 << 22

// eventColumns are the events table's columns, in storecopy's order, which
// the store's events rows follow.
var eventColumns = []string{"id", "lock_id", "kind", "at", "holder", "token", "ttl_ms", "position",
	"inferred", "resource", "request_id", "detail", "seq", "margin_permille", "renewed_at"}

// The index of each column in an events row.
const (
	evID = iota
	evLock
	evKind
	evAt
	evHolder
	evToken
	evTTL
	evPosition
	evInferred
	evResource
	evRequestID
	evDetail
	evSeq
	evMargin
	evRenewedAt
)

// renewalColumns are the renewals table's columns, in renewalRow's order.
var renewalColumns = []string{"id", "lock_id", "at", "renewed_at", "seq", "ttl_ms", "margin_permille", "position", "detail"}

// The renewals table's values for "none" in its NOT NULL columns.
const (
	noMargin    = math.MinInt32
	noRenewedAt = audit.NoNanos
)

// renewalRow returns the renewals row of an events row, and whether the row
// is a compact renewal that the renewals table holds as it is. It is the
// condition of migration 0003, which moved the rows stored before.
func renewalRow(ev []any) ([]any, bool) {
	if ev[evKind] != string(audit.EventRenew) || ev[evHolder] != "" || ev[evToken] != nil ||
		ev[evInferred] != false || ev[evResource] != "" || ev[evRequestID] != nil {
		return nil, false
	}
	seq, ok := ev[evSeq].(int64)
	if !ok || seq < 1 || seq > math.MaxInt32 {
		return nil, false
	}
	ttl, ok := ev[evTTL].(int64)
	if !ok || ttl < 0 || ttl > math.MaxInt32 {
		return nil, false
	}
	margin := int64(noMargin)
	if ev[evMargin] != nil {
		if margin, ok = ev[evMargin].(int64); !ok || margin <= math.MinInt32 || margin > math.MaxInt32 {
			return nil, false
		}
	}
	renewedAt := int64(noRenewedAt)
	if ev[evRenewedAt] != nil {
		if renewedAt, ok = ev[evRenewedAt].(int64); !ok || renewedAt == noRenewedAt {
			return nil, false
		}
	}
	detail := ""
	if ev[evDetail] != nil {
		if detail, ok = ev[evDetail].(string); !ok || detail == "" {
			return nil, false
		}
	}
	position, ok := ev[evPosition].(string)
	if !ok {
		return nil, false
	}
	return []any{ev[evID], ev[evLock], ev[evAt], renewedAt, int32(seq), int32(ttl), int32(margin), position, detail}, true
}

// prefixed is the columns, each prefixed, comma-separated.
func prefixed(prefix string, columns []string) string {
	out := make([]string, len(columns))
	for i, c := range columns {
		out[i] = prefix + c
	}
	return strings.Join(out, ", ")
}

// partitions are the id ranges of the renewals table's partitions, sorted,
// as of the last committed change.
type partitions struct {
	span  int64
	froms []int64 // each partition's first id; it covers span ids
}

// has says whether the partition of id exists.
func (p partitions) has(id int64) bool {
	_, ok := slices.BinarySearch(p.froms, p.from(id))
	return ok
}

// from is the first id of the partition id belongs to.
func (p partitions) from(id int64) int64 { return id - id%p.span }

// partitionName names the partition whose ids begin at from.
func partitionName(from int64) string { return "renewals_" + strconv.FormatInt(from, 10) }

var partitionBound = regexp.MustCompile(`^FOR VALUES FROM \('?(\d+)'?\) TO \('?(\d+)'?\)$`)

// loadPartitions reads the partitions attached to renewals. Each must span
// span ids, which the partitions made by this store and by migration 0003
// do; one of another span (a store opened with another RenewalSpan) is
// refused, naming it, rather than misplaced.
func loadPartitions(ctx context.Context, q querier, span int64) (partitions, error) {
	p := partitions{span: span}
	rows, err := q.Query(ctx, `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'renewals'::regclass AND NOT i.inhdetachpending`)
	if err != nil {
		return p, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			return p, err
		}
		m := partitionBound.FindStringSubmatch(bound)
		if m == nil {
			return p, fmt.Errorf("renewals partition %s: bound %q is not a range of ids", name, bound)
		}
		from, _ := strconv.ParseInt(m[1], 10, 64)
		to, _ := strconv.ParseInt(m[2], 10, 64)
		if from%span != 0 || to-from != span {
			return p, fmt.Errorf("renewals partition %s covers ids %d to %d, not a span of %d: open the store with the span its partitions were made with", name, from, to, span)
		}
		p.froms = append(p.froms, from)
	}
	slices.Sort(p.froms)
	return p, rows.Err()
}

// partitionsLock and pruneLock key the advisory locks that order replicas
// sharing a store: the creation of a partition of renewals, and a retention
// step, whose summaries two replicas would otherwise both count.
const (
	partitionsLock = `hashtext('leasewatch: renewals partitions')`
	pruneLock      = `hashtext('leasewatch: retention')`
)

// ensurePartitions creates, within tx, the partitions that the renewals
// rows (ids in renewalRow's first column) need and p lacks, and returns p
// with them. Attaching takes a SHARE UPDATE EXCLUSIVE lock on renewals,
// which neither reads nor writes wait for; it happens once per span of ids.
func ensurePartitions(ctx context.Context, tx pgx.Tx, p partitions, rows [][]any) (partitions, error) {
	for _, r := range rows {
		id := r[0].(int64)
		if p.has(id) {
			continue
		}
		// Another replica sharing the store may have made it since this
		// store last looked: look again under a lock that orders the
		// replicas' creations (held to the end of tx, once per span).
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+partitionsLock+`)`); err != nil {
			return p, fmt.Errorf("lock renewals partitions: %w", err)
		}
		fresh, err := loadPartitions(ctx, tx, p.span)
		if err != nil {
			return p, err
		}
		if fresh.has(id) {
			p = fresh
			continue
		}
		from := p.from(id)
		name := partitionName(from)
		if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE renewals) WITH (autovacuum_vacuum_insert_scale_factor = 0.02)`); err != nil {
			return p, fmt.Errorf("create renewals partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE renewals ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`,
			name, from, from+p.span)); err != nil {
			return p, fmt.Errorf("attach renewals partition %s: %w", name, err)
		}
		i, _ := slices.BinarySearch(p.froms, from)
		p.froms = slices.Insert(slices.Clone(p.froms), i, from) // p's slice may be the committed one
	}
	return p, nil
}

// splitEvents splits events rows into those of the events table and those
// of renewals, keeping their order.
func splitEvents(rows [][]any) (events, renewals [][]any) {
	for _, ev := range rows {
		if r, ok := renewalRow(ev); ok {
			renewals = append(renewals, r)
		} else {
			events = append(events, ev)
		}
	}
	return events, renewals
}

// copyEvents writes events rows (ids included) into events and renewals by
// COPY, creating the partitions they need, and returns the partitions.
func copyEvents(ctx context.Context, tx pgx.Tx, p partitions, rows [][]any) (partitions, error) {
	events, renewals := splitEvents(rows)
	if len(events) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, eventColumns, pgx.CopyFromRows(events)); err != nil {
			return p, err
		}
	}
	if len(renewals) == 0 {
		return p, nil
	}
	p, err := ensurePartitions(ctx, tx, p, renewals)
	if err != nil {
		return p, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"renewals"}, renewalColumns, pgx.CopyFromRows(renewals)); err != nil {
		return p, err
	}
	return p, nil
}

// highestEventID is the newest event id the database has given out, stored
// or not (a batch that rolled back used its ids): every stored event's id
// is at most this.
func highestEventID(ctx context.Context, q querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM events_id_seq`).Scan(&n)
	return n, err
}

// highestLogID is the newest renewal_log id stored: the ids a store gives
// out come from blocks it reserves (newLogIDs), which the sequence's value
// does not tell.
func highestLogID(ctx context.Context, q querier) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM renewal_log`).Scan(&n)
	return n, err
}
