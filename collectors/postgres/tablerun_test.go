package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestTablesConfig: each bad key of a source's tables is refused with its
// path, and a good entry becomes the table the collector watches.
func TestTablesConfig(t *testing.T) {
	refused(t, []refusal{
		{"UnknownPreset", `tables: [{preset: quartz}]`, `tables[0].preset: "quartz" is none of goose_lock, qrtz_fired_triggers`},
		{"PresetWithMappingKey", `tables: [{preset: shedlock, holder: owner}]`, "tables[0].holder: a preset takes only table, duration and clock"},
		{"PresetPolled", `tables: [{preset: shedlock, poll: true}]`, "tables[0].poll: a preset takes only"},
		{"DurationOfExpiringPreset", `tables: [{preset: shedlock, duration: 1m}]`, "tables[0].duration: preset shedlock's lease runs out at its lock_until column"},
		{"PresetClock", `tables: [{preset: shedlock, clock: wall}]`, `tables[0].clock: "wall" is neither`},
		{"PresetTable", `tables: [{preset: shedlock, table: Jobs.ShedLock}]`, `tables[0].table: "Jobs.ShedLock" is not a lower-case PostgreSQL name`},
		{"NoTable", `tables: [{names: [name], holder: owner}]`, "tables[0].table: a table name is required"},
		{"NoNames", `tables: [{table: locks, holder: owner}]`, "tables[0].names: at least one column"},
		{"NoHolder", `tables: [{table: locks, names: [name]}]`, "tables[0].holder: the column naming the holder is required"},
		{"ExpiresAndRenewed", `tables: [{table: locks, names: [name], holder: owner, expires: until, renewed: beat, duration: 1m}]`, "tables[0].expires, renewed: at most one"},
		{"DurationWithExpires", `tables: [{table: locks, names: [name], holder: owner, expires: until, duration: 1m}]`, "tables[0].duration: goes with renewed"},
		{"RenewedWithoutDuration", `tables: [{table: locks, names: [name], holder: owner, renewed: beat}]`, "tables[0].duration: renewed needs"},
		{"Column", `tables: [{table: locks, names: [Name], holder: owner}]`, `tables[0].names: "Name" is not a lower-case`},
		{"KeyColumn", `tables: [{table: locks, key: [a-b], names: [name], holder: owner}]`, `tables[0].key: "a-b"`},
		{"TokenColumn", `tables: [{table: locks, names: [name], holder: owner, token: "v 2"}]`, `tables[0].token: "v 2"`},
		{"HeldIfValue", `tables: [{table: locks, names: [name], holder: owner, held_if: {state: [a]}}]`, "tables[0].held_if: state: the value must be"},
		{"Class", `tables: [{table: locks, names: [name], holder: owner, class: job}]`, `tables[0].class: "job" is neither`},
		{"MappingClock", `tables: [{table: locks, names: [name], holder: owner, clock: wall}]`, `tables[0].clock: "wall" is neither`},
		{"SecondEntry", `tables: [{preset: shedlock}, {table: locks, names: [name]}]`, "tables[1].holder:"},
		{"TableTwice", `tables: [{preset: shedlock}, {preset: goose_lock, table: shedlock}]`, "tables[1].table: shedlock is tables[0] already"},
		{"NothingToWatch", `advisory: false`, "advisory: false leaves nothing to watch"},
	})
	t.Run("Good", func(t *testing.T) {
		s := section(t, `advisory: false
tables:
  - {preset: river_leader}
  - {preset: shedlock, table: jobs.shedlock, clock: database}
  - {preset: scheduled_tasks, duration: 10m}
  - {table: leases, names: [name], holder: owner, renewed: beat, duration: 30s, token: fence, held_if: {active: true, level: 2, state: run}, poll: true}`)
		if err := s.Check(false); err != nil {
			t.Fatal(err)
		}
		cfg, err := s.config(collectors.Source{Name: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		ts := cfg.Tables
		switch {
		case !cfg.NoAdvisory || len(ts) != 4:
			t.Fatalf("config: %+v", cfg)
		case !ts[0].Polled || ts[1].Polled || ts[2].Polled || !ts[3].Polled:
			t.Fatalf("polled: %v %v %v %v; want river_leader and the polled mapping", ts[0].Polled, ts[1].Polled, ts[2].Polled, ts[3].Polled)
		case ts[1].Mapping.Table != "jobs.shedlock" || ts[1].Mapping.Clock != DatabaseClock:
			t.Fatalf("shedlock overridden: %+v", ts[1].Mapping)
		case ts[2].Mapping.Duration != 10*time.Minute:
			t.Fatalf("scheduled_tasks duration %s, want 10m", ts[2].Mapping.Duration)
		}
		want := []Match{{"active", true}, {"level", int64(2)}, {"state", "run"}}
		if got := ts[3].Mapping.HeldIf; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("held_if = %v, want %v (sorted, integers as int64)", got, want)
		}
	})
}

// refusal is a section's YAML and the start of the error Check must give.
type refusal struct{ name, yaml, want string }

// refused checks, a subtest each, that each section is refused with an
// invalid-input error starting with its want.
func refused(t *testing.T, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := section(t, c.yaml).Check(false)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) || audit.ErrorCode(err) != audit.EINVALID {
				t.Fatalf("Check: %v\nwant an invalid-input error starting %q", err, c.want)
			}
		})
	}
}

func section(t *testing.T, doc string) *Section {
	t.Helper()
	s := new(Section)
	if err := yaml.Unmarshal([]byte("url: postgres://db.example/app\n"+doc), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSectionExpiresByClock: a source with a lease table has leases that
// run out by the clock, for alerting to judge only up to what it vouched
// for; one of advisory locks and fenced tables alone has none.
func TestSectionExpiresByClock(t *testing.T) {
	for doc, want := range map[string]bool{
		"":                             false,
		"tables: [{preset: shedlock}]": true,
		"tables: [{table: invoices, fence: fence, lock: jobs/report}]":                         false,
		"tables: [{table: invoices, fence: fence, lock: jobs/report}, {preset: river_leader}]": true,
	} {
		if got := Backend.ExpiresByClockFor(section(t, doc)); got != want {
			t.Errorf("%q: expires by the clock %v, want %v", doc, got, want)
		}
	}
}

// TestOldCursor: a cursor stored before lease tables, the server's start
// time, is still the advisory part's.
func TestOldCursor(t *testing.T) {
	c := parseCursor("2026-12-01T10:00:00Z")
	if len(c.Parts) != 1 || c.Parts[advisoryPart] != "2026-12-01T10:00:00Z" {
		t.Fatalf("parts = %v, want the advisory part's start time", c.Parts)
	}
}

// tablesSource is a source of advisory locks, ShedLock's table streamed
// and River's river_leader polled, in a database of its own, as a role
// with REPLICATION and SELECT on the tables, the publication created by
// the operator.
type tablesSource struct {
	srv  *pgtest.Server
	db   string
	url  string
	conn *pgx.Conn
	cfg  Config
}

func newTablesSource(t *testing.T, name string) *tablesSource {
	t.Helper()
	shed, _ := LookupPreset("shedlock")
	river, _ := LookupPreset("river_leader")
	return openTablesSource(t, name, "shedlock, river_leader", "shedlock", []Table{{Mapping: shed.Mapping}, {Mapping: river.Mapping, Polled: true}},
		ShedLockTable, riverLeaderDDL)
}

// openTablesSource makes a database with ddl, lets the watcher role read
// the tables granted and stream through the source's slot the ones
// published (as the operator would), and returns the source of tables on
// it, polling every 100 ms.
func openTablesSource(t *testing.T, name, granted, published string, tables []Table, ddl ...string) *tablesSource {
	t.Helper()
	srv := shared(t)
	db := database(t, srv)
	for _, sql := range ddl {
		admin(t, srv, db, sql)
	}
	admin(t, srv, "postgres", "ALTER ROLE "+watcher+" REPLICATION")
	admin(t, srv, db, "GRANT SELECT ON "+granted+" TO "+watcher)
	admin(t, srv, db, "CREATE PUBLICATION "+SlotName(name)+" FOR TABLE "+published)
	conn, err := pgx.Connect(t.Context(), srv.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	cfg := Config{Name: name, URL: watchURL(srv, db), PollEvery: 100 * time.Millisecond, Password: collectors.Password(watcherPassword),
		Tables: tables}
	return &tablesSource{srv: srv, db: db, url: srv.URL(db), conn: conn, cfg: cfg}
}

func (s *tablesSource) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (s *tablesSource) collector(t *testing.T, cfg Config) *Collector {
	t.Helper()
	c, err := New(cfg, collectortest.Logger(t, cfg.Name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// slots counts the source's slots on the server.
func (s *tablesSource) slots(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", SlotName(s.cfg.Name)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// events waits for the lock's stored events to be want, by kind and holder.
func events(t *testing.T, sink *collectortest.Sink, lock string, want ...string) {
	t.Helper()
	var got []string
	defer func() {
		if t.Failed() {
			t.Logf("%s's events: %s", lock, strings.Join(got, ", "))
		}
	}()
	collectortest.Eventually(t, 10*time.Second, fmt.Sprintf("%s's events to be %s", lock, strings.Join(want, ", ")), func() bool {
		got = got[:0]
		for _, e := range sink.Events(t, lock) {
			if e.Kind != audit.EventBlind {
				got = append(got, string(e.Kind)+" "+e.Holder)
			}
		}
		return slices.Equal(got, want)
	})
}

// TestTablesCollector: a source's lease tables end to end, through the
// collector and the Recorder, next to its advisory locks.
func TestTablesCollector(t *testing.T) {
	src := newTablesSource(t, "jobs db")
	sink := collectortest.NewSink(t, src.cfg.Name, Backend.Kind)
	c := src.collector(t, src.cfg)
	reg := prometheus.NewRegistry()
	// As the Runner registers them: every source's collector, two here.
	other, err := New(Config{Name: "other", URL: src.cfg.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(c, other)
	run := collectortest.Run(t, c, sink)

	// ShedLock, streamed: a grant, a renewal and a release; then a grant
	// left to run out by the clock (ShedLock's times are the holder's).
	now := time.Now().UTC()
	src.exec(t, ShedLockAcquire, "report", now.Add(time.Minute), now, "node-a")
	src.exec(t, ShedLockExtend, "report", "node-a", now.Add(2*time.Minute), now)
	src.exec(t, ShedLockUnlock, "report", time.Now().UTC())
	events(t, sink, "shedlock/report", "grant node-a", "renew node-a", "release node-a")
	now = time.Now().UTC()
	src.exec(t, ShedLockAcquire, "report", now.Add(time.Second), now, "node-b")
	events(t, sink, "shedlock/report", "grant node-a", "renew node-a", "release node-a", "grant node-b", "expire node-b")
	// River's leader, polled.
	src.exec(t, `INSERT INTO river_leader (leader_id, elected_at, expires_at) VALUES ('river-1', now(), now() + interval '1 minute')`)
	events(t, sink, "river_leader/default", "grant river-1")
	src.exec(t, `DELETE FROM river_leader`)
	events(t, sink, "river_leader/default", "grant river-1", "release river-1")
	collectortest.Eventually(t, 15*time.Second, "the slot's retained WAL reported, of this source alone", func() bool {
		return testutil.CollectAndCount(reg, "leasewatch_postgres_slot_retained_wal_bytes") == 1
	})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if ms := mf.GetMetric(); mf.GetName() == "leasewatch_postgres_slot_retained_wal_bytes" &&
			(len(ms[0].GetLabel()) != 1 || ms[0].GetLabel()[0].GetValue() != "jobs db" || ms[0].GetGauge().GetValue() < 0) {
			t.Fatalf("the retained WAL's series: %v; want one of source \"jobs db\", not negative", ms)
		}
	}

	// A lock held across the restarts below: no part's snapshot ends it.
	now = time.Now().UTC()
	src.exec(t, ShedLockAcquire, "weekly", now.Add(time.Hour), now, "node-w")
	events(t, sink, "shedlock/weekly", "grant node-w")

	// Stopped, and changes meanwhile: the restart from the stored cursor
	// streams each once, and the polled table's gap is a blind window.
	run.Stop(t)
	held, holder := holdAdvisory(t, src)
	for i := range 3 {
		now := time.Now().UTC()
		holder := []string{"node-c", "node-d", "node-e"}[i]
		src.exec(t, ShedLockAcquire, "nightly", now.Add(time.Hour), now, holder)
		src.exec(t, ShedLockUnlock, "nightly", now)
	}
	sink2 := collectortest.NewSink(t, src.cfg.Name, Backend.Kind, collectortest.AtPath(sink.Path))
	sink.Close()
	run = collectortest.Run(t, src.collector(t, src.cfg), sink2)
	events(t, sink2, "shedlock/nightly", "grant node-c", "release node-c", "grant node-d", "release node-d", "grant node-e", "release node-e")
	events(t, sink2, "shedlock/report", "grant node-a", "renew node-a", "release node-a", "grant node-b", "expire node-b")
	events(t, sink2, held, "grant "+holder) // taken while the collector was stopped
	events(t, sink2, "shedlock/weekly", "grant node-w")
	run.Stop(t)

	// The slot dropped while the collector was stopped: the changes since
	// are lost, a blind window, and a new slot's snapshot.
	admin(t, src.srv, src.db, "SELECT pg_drop_replication_slot($1)", SlotName(src.cfg.Name))
	src.exec(t, ShedLockUnlock, "weekly", time.Now().UTC())
	run = collectortest.Run(t, src.collector(t, src.cfg), sink2)
	events(t, sink2, "shedlock/weekly", "grant node-w", "release node-w")
	if !slices.ContainsFunc(sink2.Blinds(), func(b audit.Blind) bool { return strings.Contains(b.Reason, "replication slot was lost") }) {
		t.Fatalf("blind windows %+v; want one for the lost slot", sink2.Blinds())
	}
	run.Stop(t)

	// The tables gone from the source: its slot goes at its next start, the
	// operator's publication stays for the operator to drop.
	if src.slots(t) != 1 {
		t.Fatal("no slot before the tables went")
	}
	advisoryOnly := src.cfg
	advisoryOnly.Tables = nil
	collectortest.Run(t, src.collector(t, advisoryOnly), sink2).Stop(t)
	if n := src.slots(t); n != 0 {
		t.Fatalf("%d slots of the source left after its tables went", n)
	}
}

// holdAdvisory takes an advisory lock in the source's database and returns
// its name and holder.
func holdAdvisory(t *testing.T, src *tablesSource) (lock, holder string) {
	t.Helper()
	h := connectHolder(t, src.srv, src.db, "jobs-runner")
	h.exec(t, "SELECT pg_advisory_lock(42)")
	return src.db + "/42", h.name()
}

// TestTablesStreamOnly: a source of one streamed table and no advisory
// locks, idle after a grant: the stream's heartbeats alone vouch for the
// time, so the lease runs out by the clock.
func TestTablesStreamOnly(t *testing.T) {
	src := newTablesSource(t, "shedlock only")
	cfg := src.cfg
	cfg.NoAdvisory, cfg.Tables = true, cfg.Tables[:1]
	sink := collectortest.NewSink(t, cfg.Name, Backend.Kind)
	collectortest.Run(t, src.collector(t, cfg), sink)
	now := time.Now().UTC()
	src.exec(t, ShedLockAcquire, "report", now.Add(time.Second), now, "node-a")
	events(t, sink, "shedlock/report", "grant node-a", "expire node-a")
}
