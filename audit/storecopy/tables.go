package storecopy

import (
	"fmt"
	"strconv"
	"strings"
)

// Type is a column's logical type. Every store keeps the same four.
type Type int

// Column types.
const (
	Int  Type = iota // int64: ids, counts, Unix nanoseconds, milliseconds
	Text             // string
	Bool             // bool (SQLite keeps 0 and 1)
	Blob             // []byte, copied as it is
)

// Column is one column of a table of the logical schema.
type Column struct {
	Name string
	Type Type
	Null bool // may be NULL
}

// Table is one table of the logical schema: its columns, of which the first
// Key are the primary key, the order rows are copied in.
type Table struct {
	Name    string
	Columns []Column
	Key     int
	// Whole tables are small and copied in one transaction that first
	// deletes what the target holds: the journal's one row, which a new
	// database starts with, and the lock counts, which the target's
	// triggers kept while the locks were copied.
	Whole bool
	// Mark tables are small and change with every batch a service writes;
	// their rows go into the copy's mark (see Copy), so that a resume
	// notices a source that changed since the copy began.
	Mark bool
	// Identity says the key is an id the store generates, whose generator
	// the target moves past the copied ids, so that the service's next
	// rows get new ones.
	Identity bool
}

func ints(names ...string) []Column {
	cs := make([]Column, len(names))
	for i, n := range names {
		cs[i] = Column{Name: n, Type: Int}
	}
	return cs
}

func col(name string, t Type, null bool) Column { return Column{Name: name, Type: t, Null: null} }

// Tables are every table of the stores' logical schema (migrations/sqlite
// after its last migration, migrations/postgres), in the order they are
// copied: each after the tables its rows refer to, and the lock counts after
// the locks. A store's own bookkeeping (Ignored) is not copied.
var Tables = []Table{
	{Name: "locks", Key: 1, Identity: true, Columns: []Column{
		col("id", Int, false), col("source", Text, false), col("kind", Text, false), col("name", Text, false),
		col("class", Text, false), col("state", Text, false), col("holder", Text, false), col("token", Int, true),
		col("acquired_at", Int, false), col("renewed_at", Int, false), col("expires_at", Int, false),
		col("lease_duration_ms", Int, false), col("changed_at", Int, false),
		col("renewed_seq", Int, true), col("renewals", Int, false),
	}},
	{Name: "lock_tracks", Key: 1, Columns: []Column{
		col("lock_id", Int, false), col("recent_from", Int, false), col("state", Text, false),
	}},
	{Name: "lock_resources", Key: 2, Columns: []Column{
		col("lock_id", Int, false), col("resource", Text, false), col("state", Text, false),
	}},
	{Name: "tenures", Key: 2, Columns: []Column{
		col("lock_id", Int, false), col("seq", Int, false), col("holder", Text, false), col("token", Int, true),
		col("granted_at", Int, false), col("observed", Bool, false), col("position", Text, false),
		col("renewals", Int, false), col("last_renewed_at", Int, false), col("lease_duration_ms", Int, false),
		col("expires_at", Int, false), col("ended_at", Int, true), col("end_reason", Text, true),
	}},
	{Name: "events", Key: 1, Identity: true, Columns: []Column{
		col("id", Int, false), col("lock_id", Int, false), col("kind", Text, false), col("at", Int, false),
		col("holder", Text, false), col("token", Int, true), col("ttl_ms", Int, false), col("position", Text, false),
		col("inferred", Bool, false), col("resource", Text, false), col("request_id", Text, true),
		col("detail", Text, true), col("seq", Int, true), col("margin_permille", Int, true), col("renewed_at", Int, true),
	}},
	// Renewals sealed into runs: each run's blob is copied as it is, in
	// the codec's format, so a copy neither decodes nor re-encodes them.
	{Name: "renewal_runs", Key: 1, Identity: true, Columns: []Column{
		col("id", Int, false), col("lock_id", Int, false), col("seq", Int, false), col("first_at", Int, false),
		col("last_at", Int, false), col("renewals", Int, false), col("ttl_ms", Int, false),
		col("min_margin_permille", Int, true), col("detail", Text, true), col("data", Blob, false),
	}},
	{Name: "findings", Key: 1, Identity: true, Columns: []Column{
		col("id", Int, false), col("lock_id", Int, false), col("class", Text, false), col("kind", Text, false),
		col("severity", Text, false), col("at", Int, false), col("until", Int, true), col("summary", Text, false),
		col("tokens", Text, false), col("holders", Text, false), col("resource", Text, false),
	}},
	{Name: "renewal_summaries", Key: 2, Columns: append(ints("lock_id", "seq", "renewals", "first_at", "last_at"),
		col("min_margin_permille", Int, true))},
	{Name: "cursors", Key: 1, Mark: true, Columns: []Column{
		col("source", Text, false), col("position", Text, false), col("at", Int, false),
	}},
	{Name: "source_blinds", Key: 3, Columns: []Column{
		col("source", Text, false), col("from_at", Int, false), col("to_at", Int, false),
		col("reason", Text, false), col("locks", Int, false),
	}},
	{Name: "source_events", Key: 1, Columns: []Column{col("source", Text, false), col("last_event_at", Int, false)}},
	// A copy keeps each source's fence, so a deposed replica's late batch is
	// refused by the new store as by the old.
	{Name: "source_fences", Key: 1, Mark: true, Columns: []Column{col("source", Text, false), col("token", Int, false), col("synced_event", Int, false)}},
	{Name: "journal", Key: 1, Whole: true, Mark: true, Columns: ints("id", "synced_event")},
	{Name: "lock_counts", Key: 3, Whole: true, Mark: true, Columns: []Column{
		col("source", Text, false), col("class", Text, false), col("state", Text, false), col("n", Int, false),
	}},
}

// Ignored are the tables a store keeps for itself, which a copy leaves out:
// each engine's record of its own migrations, the target's copy mark, and
// the fence refusals that replicas sharing the source have yet to record
// (a copy is taken of a store no replica writes), the kept verdicts,
// which the verdict keeper judges again, and the counts of writes per
// minute and per tick and of findings per minute, which the target's
// triggers keep as the events and findings are copied.
var Ignored = []string{"schema_migrations", MarkTable, "fence_refusals", "lock_verdicts", "write_bins", "write_ticks", "finding_minutes"}

// Converted are the tables of one store's own that its Snapshot reads as
// rows of Tables, and that a copy so leaves out of the schemas it
// compares: the renewal log (SQLite's 0026, PostgreSQL's 0016), whose
// renewals it gives as runs (those its sync marks cover) and as compact
// renewal rows of events numbered after every row (those a restore
// replays), so that a target, which writes no log rows of a copy, holds
// each once.
var Converted = []string{"renewal_log", "renewal_log_marks"}

// MarkTable is the table in which a target keeps the mark of the copy it
// holds (Target.SetMark).
const MarkTable = "copy_source"

// Names returns the column names, comma-separated, in order.
func (t Table) Names() string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// Select is the query that reads t's rows in key order, for a store whose
// placeholders are numbered ($1, PostgreSQL) or not (?, SQLite). With after,
// it reads only rows past a key, given as the first Key arguments; with
// limit, at most as many rows as the argument after them.
func (t Table) Select(numbered, after, limit bool) string {
	keys := make([]string, t.Key)
	for i := range keys {
		keys[i] = t.Columns[i].Name
	}
	n := 0
	arg := func() string {
		n++
		if numbered {
			return "$" + strconv.Itoa(n)
		}
		return "?"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT %s FROM %s", t.Names(), t.Name)
	if after {
		ps := make([]string, t.Key)
		for i := range ps {
			ps[i] = arg()
		}
		// A row value comparison: both engines order it as the key's index.
		fmt.Fprintf(&b, " WHERE (%s) > (%s)", strings.Join(keys, ", "), strings.Join(ps, ", "))
	}
	fmt.Fprintf(&b, " ORDER BY %s", strings.Join(keys, ", "))
	if limit {
		fmt.Fprintf(&b, " LIMIT %s", arg())
	}
	return b.String()
}

// SelectLast is the query that reads the key of t's last row in key order.
func (t Table) SelectLast() string {
	keys := make([]string, t.Key)
	desc := make([]string, t.Key)
	for i := range keys {
		keys[i] = t.Columns[i].Name
		desc[i] = keys[i] + " DESC"
	}
	return fmt.Sprintf("SELECT %s FROM %s ORDER BY %s LIMIT 1", strings.Join(keys, ", "), t.Name, strings.Join(desc, ", "))
}

// Normalize converts the values a driver scanned for a row of t, in place,
// to the logical types: int64, string, bool or nil. It fails, naming the
// column, on a value the column cannot hold (a NULL in a NOT NULL column, a
// number in a text column), which a copy must not carry over silently.
func (t Table) Normalize(row []any) error {
	return t.normalize(t.Columns, row)
}

// NormalizeKey is Normalize of a row's key.
func (t Table) NormalizeKey(key []any) error { return t.normalize(t.Columns[:t.Key], key) }

func (t Table) normalize(cols []Column, row []any) error {
	if len(row) != len(cols) {
		return fmt.Errorf("%s: %d values for %d columns", t.Name, len(row), len(cols))
	}
	for i, c := range cols {
		v, err := c.normalize(row[i])
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t.Name, c.Name, err)
		}
		row[i] = v
	}
	return nil
}

func (c Column) normalize(v any) (any, error) {
	if v == nil {
		if !c.Null {
			return nil, fmt.Errorf("NULL in a NOT NULL column")
		}
		return nil, nil
	}
	switch c.Type {
	case Int:
		switch x := v.(type) {
		case int64:
			return x, nil
		case int32:
			return int64(x), nil
		case int16:
			return int64(x), nil
		case int:
			return int64(x), nil
		}
	case Text:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case Blob:
		if x, ok := v.([]byte); ok {
			return x, nil
		}
	case Bool:
		switch x := v.(type) {
		case bool:
			return x, nil
		case int64:
			if x == 0 || x == 1 {
				return x == 1, nil
			}
		}
	}
	return nil, fmt.Errorf("unexpected value %v (%T)", v, v)
}

// KeyOf returns the key of a row of t.
func (t Table) KeyOf(row []any) []any { return row[:t.Key:t.Key] }
