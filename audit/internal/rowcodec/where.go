package rowcodec

import (
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Where accumulates a query's conditions and their arguments. Conditions are
// written with ? for each argument; a Numbered Where (PostgreSQL) writes them
// as $1, $2, ... in the order the arguments were added, which is what both
// stores' queries are built in.
type Where struct {
	Numbered bool
	Conds    []string
	Args     []any
}

// Add adds a condition and its arguments, one for each ? in cond.
func (w *Where) Add(cond string, args ...any) {
	if !w.Numbered {
		w.Conds = append(w.Conds, cond)
		w.Args = append(w.Args, args...)
		return
	}
	var b strings.Builder
	for i, part := range strings.Split(cond, "?") {
		if i > 0 {
			b.WriteString(w.Arg(args[i-1]))
		}
		b.WriteString(part)
	}
	w.Conds = append(w.Conds, b.String())
}

// Arg adds an argument used outside the conditions (a LIMIT) and returns its
// placeholder.
func (w *Where) Arg(v any) string {
	w.Args = append(w.Args, v)
	if !w.Numbered {
		return "?"
	}
	return "$" + strconv.Itoa(len(w.Args))
}

// Window adds col's bounds from f; zero bounds stay open.
func (w *Where) Window(col string, f audit.TimeFilter) {
	if !f.From.IsZero() {
		w.Add(col+" >= ?", audit.Nanos(f.From))
	}
	if !f.To.IsZero() {
		w.Add(col+" <= ?", audit.Nanos(f.To))
	}
}

// String is the WHERE clause, or "" without conditions.
func (w *Where) String() string {
	if len(w.Conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.Conds, " AND ")
}

// LikeEscaper makes a string match itself literally in LIKE ... ESCAPE '\'.
var LikeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Dialect is what the shared conditions write differently per engine.
type Dialect struct {
	Numbered bool // $n placeholders (PostgreSQL) rather than ?
	// Like matches ASCII letters whatever their case: SQLite's LIKE,
	// PostgreSQL's ILIKE under COLLATE "C".
	Like string
	// Wide casts an int64 column or argument so that the difference of two
	// times cannot overflow: "" where the engine computes in floating point
	// past int64 (SQLite), "::numeric" for PostgreSQL.
	Wide string
	// Text casts a placeholder to text where the engine must know its type
	// ("::text" for PostgreSQL, whose row comparisons and select lists do
	// not infer it).
	Text string
}

// P is the placeholder of the query's i-th argument (from 1), for queries
// that use an argument more than once.
func (d Dialect) P(i int) string {
	if d.Numbered {
		return "$" + strconv.Itoa(i)
	}
	return "?" + strconv.Itoa(i)
}

// Where returns an empty Where for d's placeholders.
func (d Dialect) Where() Where { return Where{Numbered: d.Numbered} }

// LockWhere turns a lock filter's selection (not its order or page) into
// conditions on the locks table as l.
func LockWhere(f audit.LockFilter, d Dialect) Where {
	w := d.Where()
	if f.Class != "" {
		w.Add("l.class = ?", string(f.Class))
	}
	if f.Source != "" {
		w.Add("l.source = ?", f.Source)
	}
	if f.Name != "" {
		w.Add("l.name = ?", f.Name)
	}
	if f.Q != "" {
		pat := "%" + LikeEscaper.Replace(f.Q) + "%"
		w.Add(`(l.name `+d.Like+` ? ESCAPE '\' OR l.holder `+d.Like+` ? ESCAPE '\')`, pat, pat)
	}
	if f.Kind != "" {
		w.Add("l.kind = ?", string(f.Kind))
	}
	if f.Holder != "" {
		w.Add("l.holder = ?", f.Holder)
	}
	if f.State != "" {
		w.Add("l.state = ?", string(f.State))
	}
	if f.Verdict != "" {
		w.Add("l.id IN (SELECT lock_id FROM lock_verdicts WHERE verdict = ?)", f.Verdict)
	}
	if !f.ChangedFrom.IsZero() {
		w.Add("l.changed_at >= ?", audit.Nanos(f.ChangedFrom))
	}
	if !f.ChangedTo.IsZero() {
		w.Add("l.changed_at <= ?", audit.Nanos(f.ChangedTo))
	}
	if f.ExpiringBy > 0 {
		// expires_at - at < ratio * lease, in nanoseconds.
		w.Add("l.state = 'held' AND l.expires_at <> ? AND l.lease_duration_ms > 0 AND l.expires_at"+d.Wide+" - ?"+d.Wide+" < l.lease_duration_ms * ?"+d.Wide,
			audit.NoNanos, audit.Nanos(f.ExpiringAt), f.ExpiringBy*float64(time.Millisecond))
	}
	return w
}
