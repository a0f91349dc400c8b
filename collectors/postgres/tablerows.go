package postgres

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Row is one row image: each column's decoded value, a string, int64,
// bool, time.Time or nil for NULL (other integer widths are taken as
// int64). A streamed DELETE's old image holds only the key columns, and a
// streamed UPDATE leaves out an unchanged TOASTed value: Rows.Apply takes
// what is missing from the row as it last saw it.
type Row map[string]any

// Change is one change of a row, as the stream or the poller saw it.
type Change struct {
	// Old is the row before (nil: inserted, or first read); New after (nil:
	// deleted). Old needs only the key columns.
	Old, New Row
	// At is the commit time (streamed) or the time of the read (polled),
	// both on the database's clock.
	At time.Time
	// LSN is the commit LSN of the transaction that made the change
	// (streamed); 0 when polled.
	LSN LSN
	// Snapshot says the row was read in the initial read, not seen
	// changing: a held row is observed, not granted.
	Snapshot bool
}

// LSN is a position in the server's write-ahead log.
type LSN uint64

// String renders the LSN as PostgreSQL does: 0/16B3748.
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint32(l)) }

// Rows turns one table's row changes into observations. It keeps the last
// image of every row and the tenure each holds, since a streamed DELETE
// carries only the key, and a renewal the token of its grant (the commit
// LSN of an earlier transaction). It does no I/O: the stream and the
// poller feed it alike, and its tests are stories of row changes.
type Rows struct {
	m    TableMapping
	rows map[string]lease
	// names counts the rows of each lock: where a lock has more than one
	// (Quartz's fired triggers of one job), a grant looks for another
	// still held (stillHeld).
	names map[string]int
}

// lease is what Rows keeps of one row: its last image and, decoded from
// it, its tenure.
type lease struct {
	row       Row
	name      string // the lock's
	held      bool
	holder    string
	granted   string    // the Granted column's value: a new one is a new tenure
	grantedAt time.Time // the Granted column's time; zero if none
	token     *int64    // the tenure's token: its column's, or its grant's commit LSN
	renewed   time.Time // the Renewed column's time; zero if none
	expires   time.Time // zero: no lease, it never runs out by the clock
}

// NewRows returns the decoding of the table m maps, after checking m.
func NewRows(m TableMapping) (*Rows, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	return &Rows{m: m, rows: make(map[string]lease), names: make(map[string]int)}, nil
}

// clone returns a copy of r that Apply can change without changing r.
func (r *Rows) clone() *Rows {
	return &Rows{m: r.m, rows: maps.Clone(r.rows), names: maps.Clone(r.names)}
}

// Mapping returns the mapping r decodes by.
func (r *Rows) Mapping() TableMapping { return r.m }

// Apply turns one row change into the observations it shows, in order: a
// grant (a row newly held, a new holder, or a new Granted or Token value),
// a renewal (the same tenure's expiry moved), a release (the holder
// cleared, a HeldIf condition no longer met, the expiry set to At or
// before, or the row deleted, while its lease had not run out) or an
// expiry (the same, after it had). A holder taking the lock anew ends its
// own tenure first, which a grant to another holder leaves to the tracker
// (an overlap, or a tenure that ran out). An error names the column whose
// value it cannot read, and changes nothing.
func (r *Rows) Apply(c Change) ([]audit.Observation, error) {
	if c.Old != nil && c.New != nil {
		oldKey, newKey := r.key(c.Old), r.key(c.New)
		if oldKey != newKey {
			// A key changed: the old row went, a new one came.
			if _, ok := r.rows[newKey]; ok {
				return nil, fmt.Errorf("%s: update of key %s onto %s, a row already seen", r.m.Table, oldKey, newKey)
			}
			trial := r.clone()
			del, err := trial.Apply(Change{Old: c.Old, At: c.At, LSN: c.LSN})
			if err != nil {
				return nil, err
			}
			ins, err := trial.Apply(Change{New: c.New, At: c.At, LSN: c.LSN, Snapshot: c.Snapshot})
			if err != nil {
				return nil, err
			}
			r.rows, r.names = trial.rows, trial.names
			return append(del, ins...), nil
		}
	}
	image := c.New
	if image == nil {
		image = c.Old
	}
	key := r.key(image)
	prev, had := r.rows[key]
	if c.New == nil {
		r.remove(key)
		if !had || !prev.held {
			return nil, nil
		}
		return []audit.Observation{r.end(prev, c, true)}, nil
	}
	row := merge(prev.row, c.New)
	next, err := r.decode(row, c.At)
	if err != nil {
		return nil, err
	}
	obs := r.step(key, prev, &next, c)
	r.put(key, next)
	return obs, nil
}

// put keeps l as the row key.
func (r *Rows) put(key string, l lease) {
	r.remove(key)
	r.rows[key] = l
	r.names[l.name]++
}

// remove forgets the row key, if r has it.
func (r *Rows) remove(key string) {
	l, ok := r.rows[key]
	if !ok {
		return
	}
	delete(r.rows, key)
	if r.names[l.name]--; r.names[l.name] <= 0 {
		delete(r.names, l.name)
	}
}

// stillHeld reports whether a row of the lock name other than key is held
// at at, by a lease that has not run out: a grant then is one holder more,
// not a handover (audit.Observation.StillHeld).
func (r *Rows) stillHeld(name, key string, at time.Time) bool {
	others := r.names[name]
	if l, ok := r.rows[key]; ok && l.name == name {
		others--
	}
	if others == 0 {
		return false
	}
	for k, l := range r.rows {
		if k != key && l.name == name && l.held && !audit.LeaseRunOut(l.expires, at) {
			return true
		}
	}
	return false
}

// Truncate ends every held row's tenure at c (its At and LSN): the table
// was emptied (TRUNCATE), which names no row.
func (r *Rows) Truncate(c Change) []audit.Observation {
	var obs []audit.Observation
	for _, k := range slices.Sorted(maps.Keys(r.rows)) {
		if l := r.rows[k]; l.held {
			obs = append(obs, r.end(l, c, true))
		}
	}
	clear(r.rows)
	clear(r.names)
	return obs
}

// step returns the observations of the row key going from prev to next,
// and gives next its tenure's token.
func (r *Rows) step(key string, prev lease, next *lease, c Change) []audit.Observation {
	switch {
	case !next.held && !prev.held:
		return nil
	case !next.held:
		return []audit.Observation{r.end(prev, c, false)}
	case !prev.held:
		return []audit.Observation{r.grant(key, next, c)}
	case r.sameTenure(prev, *next):
		next.token = prev.token
		if next.expires.Equal(prev.expires) && next.renewed.Equal(prev.renewed) {
			return nil
		}
		ob := r.observe(*next, c, audit.EventRenew)
		if !next.expires.IsZero() && next.expires.Before(prev.expires) {
			// ShedLock's unlock under lockAtLeastFor: released by its
			// holder, still held until then.
			ob.Detail = map[string]any{"shortened": true}
		}
		return []audit.Observation{ob}
	}
	var obs []audit.Observation
	switch {
	case next.holder == prev.holder:
		// Without a token the tracker would take this for the same
		// tenure: end it here.
		obs = append(obs, r.end(prev, c, false))
	case r.endedUnseen(prev, *next, c):
		ob := r.end(prev, c, false)
		ob.Kind, ob.Inferred = audit.EventRelease, true
		obs = append(obs, ob)
	}
	return append(obs, r.grant(key, next, c))
}

// endedUnseen reports whether prev's tenure must have ended between two
// reads of a polled table before next's holder took the row: on the
// database's clock the application's SQL only lets a new holder in once
// the row is free or its lease has run out (River deletes its row when it
// resigns, and the next leader inserts its own within milliseconds), so a
// new holder granted before prev's lease ran out follows a release the
// reads did not see. Where the times are the holders' own, such a grant
// can be a real overlap, and a stream sees every change: neither infers.
func (r *Rows) endedUnseen(prev, next lease, c Change) bool {
	granted := next.grantedAt
	if granted.IsZero() {
		granted = c.At
	}
	return c.LSN == 0 && !c.Snapshot && r.m.Clock != HolderClock && !audit.LeaseRunOut(prev.expires, granted)
}

// grant gives the tenure newly granted in the row key its token (its
// column's value, else the commit LSN of the granting transaction, else
// none) and returns its observation, StillHeld where another row of its
// lock is held.
func (r *Rows) grant(key string, l *lease, c Change) audit.Observation {
	if r.m.Token == "" && c.LSN != 0 {
		l.token = audit.Int64(int64(c.LSN))
	}
	ob := r.observe(*l, c, audit.EventGrant)
	ob.StillHeld = ob.Kind == audit.EventGrant && r.stillHeld(l.name, key, c.At)
	return ob
}

// sameTenure reports whether two held images of one row are one tenure.
func (r *Rows) sameTenure(a, b lease) bool {
	return a.holder == b.holder && a.granted == b.granted && equalToken(a.token, b.token, r.m.Token != "")
}

// equalToken compares column tokens; a commit LSN is not in the row, so
// it never tells two images apart.
func equalToken(a, b *int64, column bool) bool {
	if !column {
		return true
	}
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// observe makes the observation of kind of a held lease.
func (r *Rows) observe(l lease, c Change, kind audit.EventKind) audit.Observation {
	if kind == audit.EventGrant && c.Snapshot {
		kind = audit.EventObserved
	}
	ob := r.base(l, c)
	ob.Kind = kind
	// When the holder renewed, by the table: a grant's own time where it
	// has one; else the change's (At).
	ob.RenewedAt = l.renewed
	if kind != audit.EventRenew && ob.RenewedAt.IsZero() {
		ob.RenewedAt = l.grantedAt
	}
	if !l.expires.IsZero() {
		ob.LeaseDuration = l.expires.Sub(ob.Renewed())
	}
	collectors.AsText(&ob)
	return ob
}

// end makes the observation of prev's tenure ending at c: expired if its
// lease had run out by then, released otherwise.
func (r *Rows) end(prev lease, c Change, deleted bool) audit.Observation {
	ob := r.base(prev, c)
	ob.Kind = audit.EventRelease
	if audit.LeaseRunOut(prev.expires, c.At) {
		ob.Kind = audit.EventExpire
	}
	if deleted {
		ob.Detail = map[string]any{"row_deleted": true}
	}
	collectors.AsText(&ob)
	return ob
}

// base is what every observation of l at c has.
func (r *Rows) base(l lease, c Change) audit.Observation {
	ob := audit.Observation{
		Lock:   audit.LockKey{Name: l.name},
		At:     c.At,
		Class:  r.m.Class,
		Holder: l.holder,
		Token:  l.token,
	}
	if c.LSN != 0 {
		ob.Position = c.LSN.String()
	}
	return ob
}

// decode reads a row's tenure at time at: held if it names a holder, meets
// every HeldIf condition, and its lease has not run out by at.
func (r *Rows) decode(row Row, at time.Time) (lease, error) {
	m := &r.m
	l := lease{row: row, name: r.name(row)}
	var err error
	if l.holder, err = text(row, m.Holder); err != nil {
		return lease{}, err
	}
	if m.Granted != "" {
		l.granted = format(row[m.Granted])
		if l.grantedAt, err = timeOf(row, m.Granted); err != nil {
			return lease{}, err
		}
	}
	if m.Token != "" {
		v, err := integer(row, m.Token)
		if err != nil {
			return lease{}, err
		}
		l.token = v
	}
	if l.renewed, l.expires, err = r.times(row); err != nil {
		return lease{}, err
	}
	l.held = l.holder != "" && r.matches(row) && !audit.LeaseRunOut(l.expires, at)
	return l, nil
}

// times reads a row's last renewal and its expiry.
func (r *Rows) times(row Row) (renewed, expires time.Time, err error) {
	m := &r.m
	if m.Renewed != "" {
		if renewed, err = timeOf(row, m.Renewed); err != nil {
			return
		}
	}
	switch {
	case m.Expires != "":
		expires, err = timeOf(row, m.Expires)
	case m.Renewed != "" && !renewed.IsZero():
		d := m.Duration
		if m.DurationColumn != "" {
			var ms *int64
			if ms, err = integer(row, m.DurationColumn); err != nil || ms == nil {
				return
			}
			d += time.Duration(*ms) * time.Millisecond
		}
		expires = audit.LeaseExpiry(renewed, d)
	}
	return
}

// matches reports whether row meets every HeldIf condition.
func (r *Rows) matches(row Row) bool {
	for _, h := range r.m.HeldIf {
		if normal(row[h.Column]) != normal(h.Value) {
			return false
		}
	}
	return true
}

// key is the row's key columns' values, told apart unambiguously.
func (r *Rows) key(row Row) string {
	parts := make([]string, 0, len(r.m.key()))
	for _, c := range r.m.key() {
		parts = append(parts, strconv.Quote(format(row[c])))
	}
	return strings.Join(parts, ",")
}

// heldLease is a held tenure as a stream's cursor keeps it (stream.go):
// the token of a tenure granted before a restart is the commit LSN of its
// grant, in no row.
type heldLease struct {
	Key       string    `json:"key"`
	Name      string    `json:"name"`
	Holder    string    `json:"holder"`
	Granted   string    `json:"granted,omitempty"`
	GrantedAt time.Time `json:"granted_at,omitzero"`
	Token     *int64    `json:"token,omitempty"`
	Renewed   time.Time `json:"renewed,omitzero"`
	Expires   time.Time `json:"expires,omitzero"`
}

// held lists the held rows' tenures, in key order.
func (r *Rows) held() []heldLease {
	var out []heldLease
	for _, k := range slices.Sorted(maps.Keys(r.rows)) {
		l := r.rows[k]
		if l.held {
			out = append(out, heldLease{Key: k, Name: l.name, Holder: l.holder, Granted: l.granted, GrantedAt: l.grantedAt,
				Token: l.token, Renewed: l.renewed, Expires: l.expires})
		}
	}
	return out
}

// restore replaces what r knows of the rows by the held tenures hs (held
// of an earlier Rows of the same table). A row's other columns are not
// kept: its next change brings them.
func (r *Rows) restore(hs []heldLease) {
	r.rows, r.names = make(map[string]lease, len(hs)), make(map[string]int)
	for _, h := range hs {
		r.put(h.Key, lease{name: h.Name, held: true, holder: h.Holder, granted: h.Granted, grantedAt: h.GrantedAt,
			token: h.Token, renewed: h.Renewed, expires: h.Expires})
	}
}

// name is the lock's name: the table, then each name column's value.
func (r *Rows) name(row Row) string {
	parts := []string{r.m.Table}
	for _, c := range r.m.Names {
		parts = append(parts, format(row[c]))
	}
	return strings.Join(parts, "/")
}

// merge returns next with what it leaves out taken from prev.
func merge(prev, next Row) Row {
	if prev == nil {
		return next
	}
	out := make(Row, len(prev))
	for k, v := range prev {
		out[k] = v
	}
	for k, v := range next {
		out[k] = v
	}
	return out
}

// normal gives integers of every width one type, so that values compare.
func normal(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	}
	return v
}

// format renders a value of a name column.
func format(v any) string {
	switch x := normal(v).(type) {
	case nil:
		return ""
	case string:
		return x
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	default:
		return fmt.Sprint(x)
	}
}

// text reads a text column; NULL is "".
func text(row Row, col string) (string, error) {
	switch x := row[col].(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	default:
		return "", fmt.Errorf("column %s: %T, want text", col, x)
	}
}

// integer reads an integer column; NULL is nil.
func integer(row Row, col string) (*int64, error) {
	switch x := normal(row[col]).(type) {
	case nil:
		return nil, nil
	case int64:
		return &x, nil
	default:
		return nil, fmt.Errorf("column %s: %T, want an integer", col, x)
	}
}

// timeOf reads a time column: a timestamp, or an integer of milliseconds
// since the Unix epoch (Quartz); NULL is the zero time.
func timeOf(row Row, col string) (time.Time, error) {
	switch x := normal(row[col]).(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return audit.ClampTime(x.UTC()), nil
	case int64:
		return audit.ClampTime(time.UnixMilli(x).UTC()), nil
	default:
		return time.Time{}, fmt.Errorf("column %s: %T, want a timestamp or epoch milliseconds", col, x)
	}
}
