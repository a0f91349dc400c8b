package postgres

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// A lease table is a table in which an application keeps its locks, one row
// per lock (ShedLock, River, Quartz, db-scheduler, goose): who holds it and
// until when. Its rows are read two ways, with the same decoding: streamed
// from logical replication where the server can publish the table (stream.go),
// polled where it cannot (an UNLOGGED table: tablepoll.go). Both turn what
// they read into Changes, and Rows.Apply turns each change into
// observations.

// Clock says whose clock a table's times are on.
type Clock string

// The clocks a table's times can be on.
const (
	// DatabaseClock: the times are written with the server's now() (River,
	// goose, ShedLock's usingDbTime()).
	DatabaseClock Clock = "database"
	// HolderClock: the holder writes its own clock's time (ShedLock by
	// default, Quartz, db-scheduler), so a holder whose clock runs ahead
	// shows as clock_skew.
	HolderClock Clock = "holder"
)

// Match is a condition on a row: column equals Value, compared after
// decoding (a bool column with true, a text column with a string).
type Match struct {
	Column string
	Value  any
}

// TableMapping says how to read locks from the rows of one table. Times
// are timestamptz, or timestamp read as UTC, or bigint milliseconds since
// the Unix epoch (Quartz); a duration column is bigint milliseconds.
type TableMapping struct {
	// Table is the table's name, optionally schema-qualified (jobs.shedlock).
	Table string
	// Key are the columns that identify a row (its primary key, which a
	// streamed DELETE carries alone); empty: Names.
	Key []string
	// Names are the columns whose values, joined by "/" after Table and a
	// "/", name the lock: shedlock/report-job.
	Names []string
	// Holder is the column naming the holder; NULL or empty: nobody holds it.
	Holder string
	// Expires is the column of when the lease runs out. At most one of it
	// and Renewed is set; with neither, a lock has no lease and ends only
	// when its row says so (Quartz's fired triggers).
	Expires string
	// Renewed is the column of the holder's last renewal; the lease runs
	// out Duration (plus DurationColumn) after it.
	Renewed string
	// Duration is the lease's duration after Renewed, or what is added to
	// DurationColumn.
	Duration time.Duration
	// DurationColumn is a column holding the lease's duration in
	// milliseconds (Quartz's checkin_interval), added to Duration.
	DurationColumn string
	// Granted is a column that changes with every grant and never on a
	// renewal (River's elected_at, ShedLock's locked_at), and gives the
	// grant's time; optional. A new value is a new tenure even of the same
	// holder.
	Granted string
	// Token is an integer column that is the grant's fencing token
	// (db-scheduler's version); optional. Without it the token is the
	// commit LSN of the granting transaction where the row is streamed,
	// and there is none where it is polled.
	Token string
	// HeldIf are conditions a row must meet to be held besides having a
	// holder (db-scheduler's picked = true, goose's locked = true).
	HeldIf []Match
	// Clock is the clock of the table's times; empty: DatabaseClock.
	Clock Clock
	// Class is the locks' class; empty: audit.ClassLock.
	Class audit.Class
}

// identifier is what a table or column name may be: lower case, as
// PostgreSQL folds unquoted names, so that the mapping names the column the
// application's own SQL does. It is also safe in a slot or publication name.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Check returns the first problem of the mapping, naming its field.
func (m TableMapping) Check() error {
	if err := checkTableName(m.Table); err != nil {
		return err
	}
	switch {
	case len(m.Names) == 0:
		return errors.New("names: at least one column naming the lock is required")
	case m.Holder == "":
		return errors.New("holder: the column naming the holder is required")
	case m.Expires != "" && m.Renewed != "":
		return errors.New("expires, renewed: at most one of them")
	case m.Expires != "" && (m.Duration != 0 || m.DurationColumn != ""):
		return errors.New("duration: goes with renewed, not with expires")
	case m.Renewed != "" && m.Duration <= 0 && m.DurationColumn == "":
		return errors.New("duration: renewed needs a positive duration or a duration column")
	case m.Clock != "" && m.Clock != DatabaseClock && m.Clock != HolderClock:
		return fmt.Errorf("clock: %q is neither %q nor %q", m.Clock, DatabaseClock, HolderClock)
	case m.Class != "" && m.Class != audit.ClassLock && m.Class != audit.ClassHeartbeat:
		return fmt.Errorf("class: %q is neither %q nor %q", m.Class, audit.ClassLock, audit.ClassHeartbeat)
	}
	for _, c := range m.columns() {
		if !identifier.MatchString(c.name) {
			return fmt.Errorf("%s: %q is not a lower-case PostgreSQL column name", c.field, c.name)
		}
	}
	for _, h := range m.HeldIf {
		switch h.Value.(type) {
		case bool, string, int64:
		default:
			return fmt.Errorf("held_if: %s: the value must be a bool, a string or an integer, not %T", h.Column, h.Value)
		}
	}
	return nil
}

// checkTableName checks a table's name as a mapping gives it.
func checkTableName(name string) error {
	schema, table := schemaTable(name)
	switch {
	case name == "":
		return errors.New("table: a table name is required")
	case !identifier.MatchString(table) || schema != "" && !identifier.MatchString(schema):
		return fmt.Errorf("table: %q is not a lower-case PostgreSQL name, optionally schema-qualified", name)
	}
	return nil
}

// schemaTable splits Table into its schema, "" when unqualified, and its
// table.
func (m TableMapping) schemaTable() (schema, table string) { return schemaTable(m.Table) }

// schemaTable splits a table's name into its schema, "" when unqualified,
// and its table.
func schemaTable(name string) (schema, table string) {
	if s, t, ok := strings.Cut(name, "."); ok {
		return s, t
	}
	return "", name
}

// field is a column of the mapping and the field that names it.
type field struct{ field, name string }

// columns lists every column the mapping names, with its field.
func (m TableMapping) columns() []field {
	var fs []field
	add := func(f string, names ...string) {
		for _, n := range names {
			if n != "" {
				fs = append(fs, field{f, n})
			}
		}
	}
	add("key", m.Key...)
	add("names", m.Names...)
	add("holder", m.Holder)
	add("expires", m.Expires)
	add("renewed", m.Renewed)
	add("duration_column", m.DurationColumn)
	add("granted", m.Granted)
	add("token", m.Token)
	for _, h := range m.HeldIf {
		add("held_if", h.Column)
	}
	return fs
}

// Columns lists the columns a reader must fetch, each once, in the order
// the mapping names them.
func (m TableMapping) Columns() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range m.columns() {
		if !seen[c.name] {
			seen[c.name] = true
			out = append(out, c.name)
		}
	}
	return out
}

// key returns the row's key columns.
func (m TableMapping) key() []string {
	if len(m.Key) > 0 {
		return m.Key
	}
	return m.Names
}

// MarkInput sets the flags of an input carrying the observations of this
// table's rows: its leases run out by the clock at the mapped expiry; a
// token, a column or a commit LSN (streamed), names one tenure and is no
// counter; the holder's clock where the table is on it.
func (m TableMapping) MarkInput(in *audit.Input) {
	in.ExpireByClock = true
	in.TokenPerTenure = true
	in.SequentialTokens = false
	in.HolderClock = m.Clock == HolderClock
}

// The presets: the lease tables of the schedulers leasewatch knows, as
// their own DDL and SQL create and write them. Publishable says whether
// logical replication can stream the table; a table it cannot (UNLOGGED)
// is polled.
//
//	preset                lock (after the table)         holder         lease runs out at                             token       clock     watched
//	shedlock              name                           locked_by      lock_until                                    commit LSN  holder    streamed
//	river_leader          name ('default')               leader_id      expires_at                                    none        database  polled: UNLOGGED
//	qrtz_scheduler_state  sched_name/instance_name       instance_name  last_checkin_time + checkin_interval + 7.5 s  commit LSN  holder    streamed; heartbeats
//	qrtz_fired_triggers   sched_name/job_group/job_name  instance_name  never: ends with its row                      commit LSN  holder    streamed
//	scheduled_tasks       task_name/task_instance        picked_by      last_heartbeat + 30 min                       version     holder    streamed
//	goose_lock            lock_id                        locked_by      lease_expires_at                              commit LSN  database  streamed
var presets = map[string]Preset{
	// ShedLock (lukas-krecan/ShedLock, README "Postgres"): one row per
	// lock, never deleted. Acquire upserts lock_until, locked_at and
	// locked_by where lock_until <= now; extend moves lock_until; unlock
	// sets lock_until to now, or to locked_at + lockAtLeastFor. Times are
	// the JVM's (timestamp without time zone, read as UTC) unless
	// usingDbTime() is set: then use the preset with clock database.
	"shedlock": {Publishable: true, Mapping: TableMapping{
		Table: "shedlock", Names: []string{"name"}, Holder: "locked_by",
		Expires: "lock_until", Granted: "locked_at", Clock: HolderClock,
	}},
	// River (riverqueue/river, riverdriver/riverpgxv5/migration): an
	// UNLOGGED table of one row, name 'default'. An election deletes the
	// expired row and inserts (leader_id, elected_at = now(), expires_at =
	// now() + TTL) in one transaction; a re-election moves expires_at; a
	// resignation deletes the row. UNLOGGED: cannot be published, polled.
	"river_leader": {Publishable: false, Mapping: TableMapping{
		Table: "river_leader", Names: []string{"name"}, Holder: "leader_id",
		Expires: "expires_at", Granted: "elected_at", Clock: DatabaseClock,
	}},
	// Quartz's clustered JDBC job store (JobStoreSupport): each scheduler
	// instance checks in every checkin_interval ms; a peer is failed
	// checkin_interval + 7.5 s after its last check-in, and its row is
	// deleted by the peer that recovers it. Liveness, so heartbeats.
	"qrtz_scheduler_state": {Publishable: true, Mapping: TableMapping{
		Table: "qrtz_scheduler_state", Names: []string{"sched_name", "instance_name"}, Holder: "instance_name",
		Renewed: "last_checkin_time", DurationColumn: "checkin_interval", Duration: 7500 * time.Millisecond,
		Clock: HolderClock, Class: audit.ClassHeartbeat,
	}},
	// Quartz's fired triggers of jobs marked @DisallowConcurrentExecution:
	// a row per firing, keyed by entry_id, EXECUTING while the job runs and
	// deleted when it completes or when a peer recovers the instance. So
	// the job is a lock held by the instance running it, with no lease of
	// its own: it ends when its row goes.
	"qrtz_fired_triggers": {Publishable: true, Mapping: TableMapping{
		Table: "qrtz_fired_triggers", Key: []string{"sched_name", "entry_id"},
		Names: []string{"sched_name", "job_group", "job_name"}, Holder: "instance_name",
		Granted: "fired_time", Clock: HolderClock,
		HeldIf: []Match{{"is_nonconcurrent", true}, {"state", "EXECUTING"}},
	}},
	// db-scheduler (kagkarlsson/db-scheduler): a pick sets picked, picked_by,
	// last_heartbeat and version = version + 1; heartbeats move
	// last_heartbeat only; completion clears picked_by with version + 1, or
	// deletes the row. An execution is dead after heartbeat interval x
	// missed heartbeats without one: 5 min x 6 by default.
	"scheduled_tasks": {Publishable: true, Mapping: TableMapping{
		Table: "scheduled_tasks", Names: []string{"task_name", "task_instance"}, Holder: "picked_by",
		Renewed: "last_heartbeat", Duration: 30 * time.Minute, Token: "version",
		HeldIf: []Match{{"picked", true}}, Clock: HolderClock,
	}},
	// goose's table locker (pressly/goose lock/internal/store/postgres.go):
	// locked, locked_by, locked_at and lease_expires_at = now() + lease set
	// on acquire, lease_expires_at moved on renewal, all cleared on release.
	"goose_lock": {Publishable: true, Mapping: TableMapping{
		Table: "goose_lock", Names: []string{"lock_id"}, Holder: "locked_by",
		Expires: "lease_expires_at", Granted: "locked_at", HeldIf: []Match{{"locked", true}}, Clock: DatabaseClock,
	}},
}

// Preset is a known lease table's mapping and how it can be watched.
type Preset struct {
	Mapping TableMapping
	// Publishable says logical replication can stream the table; false
	// (River's UNLOGGED river_leader) means it is polled.
	Publishable bool
}

// PresetNames lists the presets' names, sorted.
func PresetNames() []string { return slices.Sorted(maps.Keys(presets)) }

// LookupPreset returns the preset of that name, and false if there is none.
// Its mapping's slices are the caller's own.
func LookupPreset(name string) (Preset, bool) {
	p, ok := presets[name]
	if !ok {
		return Preset{}, false
	}
	m := &p.Mapping
	m.Key = append([]string(nil), m.Key...)
	m.Names = append([]string(nil), m.Names...)
	m.HeldIf = append([]Match(nil), m.HeldIf...)
	return p, true
}
