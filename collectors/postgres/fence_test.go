package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestFenceConfig: each bad key of a fenced table is refused with its
// path, and a good entry becomes a fenced table, streamed.
func TestFenceConfig(t *testing.T) {
	refused(t, []refusal{
		{"NoFence", `tables: [{table: invoices, lock: jobs/report}]`, "tables[0].fence: the column holding the fencing token is required"},
		{"NoLock", `tables: [{table: invoices, fence: fence}]`, "tables[0].lock: the lock the table is fenced by is required"},
		{"LockAndColumn", `tables: [{table: invoices, fence: fence, lock: jobs/report, lock_column: job}]`, "tables[0].lock, lock_column: at most one"},
		{"NoTable", `tables: [{fence: fence, lock: jobs/report}]`, "tables[0].table: a table name is required"},
		{"Table", `tables: [{table: Invoices, fence: fence, lock: jobs/report}]`, `tables[0].table: "Invoices" is not a lower-case`},
		{"FenceColumn", `tables: [{table: invoices, fence: "fence token", lock: jobs/report}]`, `tables[0].fence: "fence token" is not a lower-case`},
		{"LockColumn", `tables: [{table: invoices, fence: fence, lock_column: Job}]`, `tables[0].lock_column: "Job" is not a lower-case`},
		{"KeyColumn", `tables: [{table: invoices, key: [id, "a-b"], fence: fence, lock: jobs/report}]`, `tables[0].key: "a-b" is not a lower-case`},
		{"HolderColumn", `tables: [{table: invoices, fence: fence, lock: jobs/report, holder: By}]`, `tables[0].holder: "By" is not a lower-case`},
		{"LockUnprintable", "tables: [{table: invoices, fence: fence, lock: \"jobs/\\u0007\"}]", `tables[0].lock: "jobs/\a" is no lock name as leasewatch records one`},
		{"LockLong", "tables: [{table: invoices, fence: fence, lock: " + strings.Repeat("x", audit.MaxText+1) + "}]", `tables[0].lock: "xxx`},
		{"LockSpaced", `tables: [{table: invoices, fence: fence, lock: " jobs/report"}]`, `tables[0].lock: " jobs/report" is no lock name`},
		{"LeaseKey", `tables: [{table: invoices, fence: fence, lock: jobs/report, expires: until}]`, "tables[0].expires: a fenced table takes only table, key, fence, lock or lock_column, and holder"},
		{"Polled", `tables: [{table: invoices, fence: fence, lock: jobs/report, poll: true}]`, "tables[0].poll: a fenced table is streamed: polling cannot tell a write from no write"},
		{"Preset", `tables: [{preset: shedlock, fence: fence}]`, "tables[0].fence: a preset takes only table, duration and clock"},
		{"TableTwice", `tables: [{preset: shedlock}, {table: shedlock, fence: fence, lock: jobs/report}]`, "tables[1].table: shedlock is tables[0] already"},
	})
	t.Run("Good", func(t *testing.T) {
		s := section(t, `advisory: false
tables:
  - {preset: scheduled_tasks}
  - {table: billing.invoices, key: [id], fence: fence, lock: scheduled_tasks/report/1, holder: written_by}
  - {table: ledger, fence: fence, lock_column: job}
  - {table: notes, fence: fence, lock: 'shedlock/a\\b'}`)
		if err := s.Check(false); err != nil {
			t.Fatal(err)
		}
		cfg, err := s.config(collectors.Source{Name: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		streamed, polled := c.tables()
		fences := c.fenced()
		want := []FenceMapping{
			{Table: "billing.invoices", Key: []string{"id"}, Fence: "fence", Lock: "scheduled_tasks/report/1", Holder: "written_by"},
			{Table: "ledger", Fence: "fence", LockColumn: "job"},
			{Table: "notes", Fence: "fence", Lock: `shedlock/a\\b`}, // the name of a lock a\b, as recorded
		}
		if len(streamed) != 1 || len(polled) != 0 || fmt.Sprint(fences) != fmt.Sprint(want) {
			t.Fatalf("streamed %v, polled %v, fenced %v; want scheduled_tasks streamed and fenced %v", streamed, polled, fences, want)
		}
	})
}

// TestFenceWrite: a fenced table's row as the write it is, its text
// bounded and escaped as every recorded name.
func TestFenceWrite(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	m := FenceMapping{Table: "invoices", Key: []string{"region", "id"}, Fence: "fence", LockColumn: "job", Holder: "by"}
	w, ok, err := m.write(Row{"region": "eu", "id": int32(7), "fence": int64(12), "job": "jobs/\x1b[2J", "by": strings.Repeat("x", 2000)}, at)
	switch {
	case err != nil || !ok:
		t.Fatalf("write: %v %v", ok, err)
	case w.Resource != "invoices/eu/7" || w.Token == nil || *w.Token != 12 || w.Outcome != audit.WriteAccepted || !w.At.Equal(at):
		t.Fatalf("write %+v; want invoices/eu/7 accepted under 12 at %s", w, at)
	case w.Lock != audit.Text("jobs/\x1b[2J") || w.Lock == "jobs/\x1b[2J":
		t.Fatalf("lock %q; want the escaped name", w.Lock)
	case len([]rune(w.Holder)) > audit.MaxText:
		t.Fatalf("holder of %d characters; want at most %d", len([]rune(w.Holder)), audit.MaxText)
	}
	// A configured lock is the name as recorded, escaped already: not
	// escaped again.
	fixed := FenceMapping{Table: "notes", Fence: "fence", Lock: `shedlock/a\\b`}
	if w, ok, err := fixed.write(Row{"fence": int64(1)}, at); !ok || err != nil || w.Lock != `shedlock/a\\b` || w.Resource != "notes" {
		t.Fatalf("write under a configured lock: %+v %v %v; want shedlock/a\\\\b's, of the table", w, ok, err)
	}
	if _, ok, err := m.write(Row{"fence": int64(1), "job": nil}, at); ok || err != nil {
		t.Fatalf("a row of no lock: %v %v; want no write", ok, err)
	}
	if w, ok, err := m.write(Row{"fence": nil, "job": "jobs/a"}, at); !ok || err != nil || w.Token != nil {
		t.Fatalf("a row of no token: %+v %v %v; want a write under no token", w, ok, err)
	}
	if _, _, err := m.write(Row{"fence": "12", "job": "jobs/a"}, at); err == nil || !strings.Contains(err.Error(), "column fence") {
		t.Fatalf("a text fence: %v; want an error naming the column", err)
	}
}

// The fenced tables of the tests: invoices written with the fence check,
// ledger by a naive UPDATE that checks nothing, each row under db-
// scheduler's task report/1 (the scheduled_tasks preset, its version the
// token).
const (
	fencedDDL = `CREATE TABLE invoices (id int PRIMARY KEY, amount int, fence bigint NOT NULL, written_by text);
		CREATE TABLE ledger (id int PRIMARY KEY, note text, fence bigint NOT NULL, written_by text);
		INSERT INTO invoices VALUES (1, 0, 0, NULL); INSERT INTO ledger VALUES (1, '', 0, NULL)`
	fencedWrite = `UPDATE invoices SET amount = $1, fence = $2, written_by = $3 WHERE id = 1 AND fence <= $2`
	naiveWrite  = `UPDATE ledger SET note = $1, fence = $2, written_by = $3 WHERE id = 1`
	fencedLock  = "scheduled_tasks/report/1"
)

// newFencedSource is a source of db-scheduler's table and the two fenced
// tables, streamed through the operator's publication.
func newFencedSource(t *testing.T, name string) *tablesSource {
	t.Helper()
	tasks, _ := LookupPreset("scheduled_tasks")
	const tables = "scheduled_tasks, invoices, ledger"
	src := openTablesSource(t, name, tables, tables, []Table{
		{Mapping: tasks.Mapping},
		{Fence: &FenceMapping{Table: "invoices", Key: []string{"id"}, Fence: "fence", Lock: fencedLock, Holder: "written_by"}},
		{Fence: &FenceMapping{Table: "ledger", Key: []string{"id"}, Fence: "fence", Lock: fencedLock, Holder: "written_by"}},
	}, dbSchedulerDDL, fencedDDL,
		`INSERT INTO scheduled_tasks (task_name, task_instance, execution_time, picked, version) VALUES ('report', '1', now(), false, 1)`)
	src.cfg.NoAdvisory = true
	return src
}

// rows runs sql and returns how many rows it changed.
func (s *tablesSource) rows(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	tag, err := s.conn.Exec(t.Context(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// story waits for the lock's stored events to be want: each its kind and
// holder, and a write's resource and token.
func story(t *testing.T, sink *collectortest.Sink, want ...string) []audit.Event {
	t.Helper()
	var got []string
	var evs []audit.Event
	defer func() {
		if t.Failed() {
			t.Logf("%s's events:\n%s", fencedLock, strings.Join(got, "\n"))
		}
	}()
	collectortest.Eventually(t, 10*time.Second, fmt.Sprintf("%s's events to be:\n%s", fencedLock, strings.Join(want, "\n")), func() bool {
		got, evs = got[:0], sink.Events(t, fencedLock)
		for _, e := range evs {
			s := string(e.Kind) + " " + e.Holder
			if e.Resource != "" {
				s += fmt.Sprintf(" %s token=%s", e.Resource, show(e.Token))
			}
			got = append(got, s)
		}
		return slices.Equal(got, want)
	})
	return evs
}

func show(tok *int64) string {
	if tok == nil {
		return "none"
	}
	return fmt.Sprint(*tok)
}

// TestFencedTables: the writes of two holders of one task, seen in the
// resource tables they write with no code of theirs reporting them. The
// holder's writes are accepted writes under its token; the old holder's
// stale write is refused by the fence check and shows nowhere, while the
// same write to a table that checks nothing is recorded and found an
// unfenced_write. A restart from the stored cursor records the writes
// made meanwhile once each.
func TestFencedTables(t *testing.T) {
	src := newFencedSource(t, "fenced jobs")
	sink := collectortest.NewSink(t, src.cfg.Name, Backend.Kind)
	run := collectortest.Run(t, src.collector(t, src.cfg), sink)
	now := time.Now().UTC()
	src.exec(t, dbSchedulerPick, "node-a", now, "report", "1", 1) // version 2
	if n := src.rows(t, fencedWrite, 10, 2, "node-a"); n != 1 {
		t.Fatalf("node-a's write under 2 changed %d rows", n)
	}
	// node-a pauses; its execution is taken for dead and picked by node-b.
	src.exec(t, dbSchedulerReschedule, now, now, "report", "1", 2) // version 3
	src.exec(t, dbSchedulerPick, "node-b", time.Now().UTC(), "report", "1", 3)
	if n := src.rows(t, fencedWrite, 20, 4, "node-b"); n != 1 {
		t.Fatalf("node-b's write under 4 changed %d rows", n)
	}
	// node-a wakes: the fence check refuses its write, the naive table
	// takes it.
	if n := src.rows(t, fencedWrite, 99, 2, "node-a"); n != 0 {
		t.Fatalf("node-a's stale write to invoices changed %d rows; want it refused by the fence", n)
	}
	if n := src.rows(t, naiveWrite, "late", 2, "node-a"); n != 1 {
		t.Fatalf("node-a's stale write to ledger changed %d rows", n)
	}
	want := []string{
		"grant node-a", "write_accepted node-a invoices/1 token=2", "release node-a",
		"grant node-b", "write_accepted node-b invoices/1 token=4", "write_accepted node-a ledger/1 token=2",
	}
	story(t, sink, want...)
	found := sink.Findings(t, fencedLock, audit.FindingUnfencedWrite)
	if len(found) != 1 || found[0].Resource != "ledger/1" || !slices.Equal(found[0].Tokens, []int64{2, 4}) {
		t.Fatalf("unfenced writes %+v; want one, of ledger/1 under 2 after 4 was granted", found)
	}

	// Stopped, and written meanwhile: the restart records those writes,
	// once each, and none of the earlier again.
	run.Stop(t)
	src.rows(t, fencedWrite, 21, 4, "node-b")
	src.rows(t, naiveWrite, "later", 2, "node-a")
	sink2 := collectortest.NewSink(t, src.cfg.Name, Backend.Kind, collectortest.AtPath(sink.Path))
	sink.Close()
	collectortest.Run(t, src.collector(t, src.cfg), sink2)
	src.rows(t, fencedWrite, 22, 4, "node-b")
	story(t, sink2, append(want, "write_accepted node-b invoices/1 token=4", "write_accepted node-a ledger/1 token=2",
		"write_accepted node-b invoices/1 token=4")...)
	if n := len(sink2.Findings(t, fencedLock, audit.FindingUnfencedWrite)); n != 2 {
		t.Fatalf("%d unfenced writes after the restart; want 2, one per stale write to ledger", n)
	}
}

// TestFencedTableUnlogged: an UNLOGGED fenced table is refused at start,
// saying why.
func TestFencedTableUnlogged(t *testing.T) {
	srv := shared(t)
	db := database(t, srv)
	admin(t, srv, db, "CREATE UNLOGGED TABLE cache (id int PRIMARY KEY, fence bigint)")
	s, err := NewStream(StreamConfig{URL: srv.URL(db), Source: "unlogged", Fences: []FenceMapping{{Table: "cache", Fence: "fence", Lock: "jobs/a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "table cache: UNLOGGED") {
		s.Close(t.Context())
		t.Fatalf("Start: %v; want the UNLOGGED fenced table refused", err)
	}
}

// TestFenceStreamRestart: a stream of a fenced table alone, stopped after
// storing two writes' batches without confirming either, so that the
// server sends both again: a start from the stored cursor gets neither
// again, only the write made since; a start from the first's, the second
// and that one.
func TestFenceStreamRestart(t *testing.T) {
	srv := shared(t)
	db := database(t, srv)
	admin(t, srv, db, "CREATE TABLE invoices (id int PRIMARY KEY, amount int, fence bigint NOT NULL); INSERT INTO invoices VALUES (1, 0, 0)")
	url := srv.URL(db)
	write := func(amount int, fence int64) {
		t.Helper()
		admin(t, srv, db, "UPDATE invoices SET amount = $1, fence = $2 WHERE id = 1 AND fence <= $2", amount, fence)
	}
	cfg := StreamConfig{URL: url, Source: "invoices", Fences: []FenceMapping{{Table: "invoices", Key: []string{"id"}, Fence: "fence", Lock: "jobs/report"}}}
	s1 := startStream(t, cfg, "")
	if b := s1.first; b == nil || len(b.Observations) != 0 || len(b.Writes) != 0 {
		t.Fatalf("initial read: %+v; want one with no observation and no write", b)
	}
	write(10, 1)
	w1 := nextWrite(t, s1, s1.first.Position, 1)
	write(20, 2)
	w2 := nextWrite(t, s1, w1.Position, 2)
	s1.Close(t.Context())

	write(30, 3)
	s2 := startStream(t, cfg, w2.Cursor)
	nextWrite(t, s2, w2.Position, 3)
	s2.Close(t.Context())
	s3 := startStream(t, cfg, w1.Cursor)
	nextWrite(t, s3, nextWrite(t, s3, w1.Position, 2).Position, 3)
}

// nextWrite returns the stream's next batch with writes, within 10 s,
// which must be one write of invoices/1 under token; every batch on the
// way must be past after.
func nextWrite(t *testing.T, s testStream, after LSN, token int64) streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		b, err := s.Next(ctx)
		switch {
		case err != nil:
			t.Fatalf("next: %v", err)
		case b.Position <= after:
			t.Fatalf("a batch at %s, not past %s: delivered again", b.Position, after)
		case len(b.Writes) == 0:
			after = b.Position
			continue
		}
		if w := b.Writes[0]; len(b.Writes) != 1 || w.Resource != "invoices/1" || w.Lock != "jobs/report" || show(w.Token) != fmt.Sprint(token) {
			t.Fatalf("writes %+v; want one of invoices/1 under %d", b.Writes, token)
		}
		return s.cursorOf(t, b)
	}
}

// TestFencedTableResourceBound: one transaction writing more resources
// than a lock keeps is refused whole, and the source fails naming the
// bound, rather than dropping writes or storing the batch's cursor past
// them.
func TestFencedTableResourceBound(t *testing.T) {
	src := newFencedSource(t, "fenced bound")
	admin(t, src.srv, src.db, "INSERT INTO invoices SELECT i, 0, 0 FROM generate_series(2, $1) i", audit.DefaultMaxResources+1)
	sink := collectortest.NewSink(t, src.cfg.Name, Backend.Kind)
	run := collectortest.Run(t, src.collector(t, src.cfg), sink)
	var before LSN
	if err := src.conn.QueryRow(t.Context(), "SELECT pg_current_wal_lsn()::text").Scan((*lsnText)(&before)); err != nil {
		t.Fatal(err)
	}
	src.exec(t, "UPDATE invoices SET fence = 1")
	err := run.Failed(t, 10*time.Second)
	if audit.ErrorCode(err) != audit.EINVALID || !strings.Contains(err.Error(), "resource") || !strings.Contains(err.Error(), "1024 resources") {
		t.Fatalf("Run: %v; want the write past the lock's 1024 resources refused, naming resource", err)
	}
	if n := len(sink.Events(t, fencedLock, audit.EventWriteAccepted)); n != 0 {
		t.Fatalf("%d writes stored of a refused batch", n)
	}
	if at := storedLSN(t, sink, src.cfg.Name); at > before {
		t.Fatalf("the stored cursor is at %s, past the refused batch's start %s", at, before)
	}
}

// lsnText scans an LSN from its text.
type lsnText LSN

func (l *lsnText) Scan(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("lsn: %T", v)
	}
	n, err := pglogrepl.ParseLSN(s)
	*l = lsnText(n)
	return err
}

// storedLSN is the stream's position in the source's stored cursor.
func storedLSN(t *testing.T, sink *collectortest.Sink, source string) LSN {
	t.Helper()
	stored, _ := sink.Cursor(source)
	var c cursor
	if err := json.Unmarshal([]byte(parseCursor(stored).Parts[streamPart]), &c); err != nil {
		t.Fatalf("stored cursor %s: %v", stored, err)
	}
	var l lsnText
	if err := l.Scan(c.LSN); err != nil {
		t.Fatal(err)
	}
	return LSN(l)
}
