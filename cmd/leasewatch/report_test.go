package main

import (
	"bytes"
	"context"
	"encoding/json"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

var reportT0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// reportDB records, through the real recorder into a SQLite file, a paused
// holder whose lease expires, the next grant, and the paused holder's late
// write that the fenced ledger rejects.
func reportDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lw.db")
	store, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	recordReportStory(t, store)
	return path
}

// recordReportStory records reportDB's story into store.
func recordReportStory(t *testing.T, store audit.Journal) {
	t.Helper()
	ctx := context.Background()
	rec := audit.NewRecorder(store, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"prod-etcd": audit.KindEtcd}}, nil)
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/orders"}
	at := func(ms int) time.Time { return reportT0.Add(time.Duration(ms) * time.Millisecond) }
	observe := func(kind audit.EventKind, ms int, holder string, token int64) {
		t.Helper()
		in := audit.Input{Source: "prod-etcd", Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: key, Kind: kind, At: at(ms), Holder: holder, Token: audit.Int64(token), LeaseDuration: 2 * time.Second}}}
		if err := rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	write := func(ms int, holder string, token int64, outcome audit.WriteOutcome) {
		t.Helper()
		w := audit.WriteReport{Source: "prod-etcd", Lock: key.Name, Resource: "ledger", Token: audit.Int64(token), Outcome: outcome, Holder: holder, At: at(ms)}
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
			t.Fatal(err)
		}
	}
	observe(audit.EventGrant, 0, "worker-1", 41)
	write(100, "worker-1", 41, audit.WriteAccepted)
	observe(audit.EventExpire, 2000, "worker-1", 41)
	observe(audit.EventGrant, 3400, "worker-2", 42)
	write(3580, "worker-2", 42, audit.WriteAccepted)
	write(5100, "worker-1", 41, audit.WriteRejected)
}

func runReport(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"report"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestReportCommand(t *testing.T) {
	db := reportDB(t)
	window := []string{"--from", "2026-03-14T10:00:00Z", "--to", "2026-03-14T10:05:00Z"}

	t.Run("MarkdownIsTheSameReportAsTheDashboards", func(t *testing.T) {
		code, out, stderr := runReport(t, append([]string{"--lock", "prod-etcd//locks/orders", "--database", db}, window...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		store, err := sqlite.Open(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		r, err := review.Load(context.Background(), store, review.Query{
			Window: review.Window{From: reportT0, To: reportT0.Add(5 * time.Minute)}, Locks: []string{"prod-etcd//locks/orders"}})
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := review.WriteMarkdown(&want, r); err != nil {
			t.Fatal(err)
		}
		if out != want.String() {
			t.Errorf("report output differs from review.WriteMarkdown:\n%s\n--- want\n%s", out, want.String())
		}
		for _, s := range []string{
			"# Incident review",
			"## prod-etcd//locks/orders",
			"At 10:00:02.000Z worker-1 (token 41) stopped renewing; its lease expired 2.0 s after the last renewal. 1.4 s later worker-2 took the lock with token 42.",
			"The ledger learned token 42 180 ms after the grant; a write with token 41 arrived 3.1 s after the expiry and was rejected by the ledger: fencing held.",
			"Verdict over the window: **fenced** (for correctness).",
			"- ledger rejected 1 write from an ended or superseded tenure: fencing stopped them",
		} {
			if !strings.Contains(out, s) {
				t.Errorf("report lacks %q:\n%s", s, out)
			}
		}
	})
	t.Run("JSONFromTheConfigsDatabase", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "leasewatch.yaml")
		yaml := "database: " + db + "\nsources:\n  - name: prod-etcd\n    kind: etcd\n    endpoints: [\"127.0.0.1:2379\"]\n    prefixes: [\"/locks/\"]\n" +
			"purposes:\n  - source: prod-etcd\n    lock: \"/locks/*\"\n    purpose: efficiency\n"
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runReport(t, append([]string{"--lock", "prod-etcd//locks/orders", "--config", cfg, "--format", "json"}, window...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var doc struct {
			Handovers int `json:"handovers"`
			Locks     []struct {
				Handovers []struct {
					Previous struct{ Token *int64 } `json:"previous"`
					Next     struct{ Token *int64 } `json:"next"`
					GapMS    int64                  `json:"gap_ms"`
				} `json:"handovers"`
				Verdict struct{ Verdict, Purpose string } `json:"verdict"`
			} `json:"locks"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		// The configuration's purposes reach the report's verdicts.
		if v := doc.Locks[0].Verdict; v.Verdict != "efficiency" || v.Purpose != "efficiency" {
			t.Errorf("verdict = %+v, want efficiency, as purposes: declares", v)
		}
		h := doc.Locks[0].Handovers[0]
		if doc.Handovers != 1 || *h.Previous.Token != 41 || *h.Next.Token != 42 || h.GapMS != 1400 {
			t.Errorf("report = %s, want one handover 41 → 42 after 1400 ms", out)
		}
	})
	t.Run("MaxWritesListsTheStaleOneAndCountsAll", func(t *testing.T) {
		code, out, stderr := runReport(t, append([]string{"--lock", "prod-etcd//locks/orders", "--database", db, "--format", "json", "--max-writes", "1"}, window...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var doc struct {
			Locks []struct {
				Handovers []struct {
					Writes []struct {
						Token   int64   `json:"token"`
						Verdict *string `json:"verdict"`
					} `json:"writes"`
					Counts struct {
						Total, Accepted, Rejected, Stale, Unfenced int
					} `json:"write_counts"`
				} `json:"handovers"`
			} `json:"locks"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		h := doc.Locks[0].Handovers[0]
		if len(h.Writes) != 1 || h.Writes[0].Token != 41 || h.Writes[0].Verdict == nil || *h.Writes[0].Verdict != "stale" {
			t.Errorf("writes = %+v, want only the stale write with token 41", h.Writes)
		}
		if c := h.Counts; c.Total != 3 || c.Accepted != 2 || c.Rejected != 1 || c.Stale != 1 || c.Unfenced != 0 {
			t.Errorf("write_counts = %+v, want 3 writes: 2 accepted, 1 rejected and stale", c)
		}
	})

	missing := filepath.Join(t.TempDir(), "none.db")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"MissingLockFlag", append([]string{"--database", db}, window...), 2, "--lock: a lock is required"},
		{"MissingFrom", []string{"--lock", "prod-etcd//locks/orders", "--database", db}, 2, "--from: a start time is required"},
		{"BadFrom", []string{"--lock", "a/b", "--database", db, "--from", "yesterday"}, 2, `--from: "yesterday": want an RFC 3339 time`},
		{"BadTo", []string{"--lock", "a/b", "--database", db, "--from", "-1h", "--to", "soon"}, 2, `--to: "soon"`},
		{"Backwards", []string{"--lock", "a/b", "--database", db, "--from", "2026-03-14T10:00:00Z", "--to", "2026-03-14T09:00:00Z"}, 2, "--to: 2026-03-14T09:00:00Z is before --from"},
		{"NegativeMaxWrites", append([]string{"--lock", "a/b", "--database", db, "--max-writes", "-1"}, window...), 2, "--max-writes: must not be negative"},
		{"BadFormat", append([]string{"--lock", "a/b", "--database", db, "--format", "pdf"}, window...), 2, `--format: "pdf": want md or json`},
		{"ConfigAndDatabase", append([]string{"--lock", "a/b", "--database", db, "--config", "x.yaml"}, window...), 2, "--database: give --config or --database, not both"},
		{"MissingDatabase", append([]string{"--lock", "a/b", "--database", missing}, window...), 1, "--database: database " + missing + " does not exist"},
		{"MissingConfig", append([]string{"--lock", "a/b", "--config", filepath.Join(t.TempDir(), "none.yaml")}, window...), 1, "--config: read config"},
		{"MissingLock", append([]string{"--lock", "prod-etcd//locks/none", "--database", db}, window...), 1, "--lock: lock prod-etcd//locks/none not found"},
		{"MalformedLock", append([]string{"--lock", "orders", "--database", db}, window...), 1, "--lock: lock \"orders\": want an id or SOURCE/NAME"},
		{"StrayArgument", append([]string{"--lock", "a/b", "--database", db, "extra"}, window...), 2, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runReport(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.stderr)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing on error", out)
			}
		})
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("a report created the missing database %s", missing)
	}
}

func TestParseReportTime(t *testing.T) {
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2026-03-14T10:00:00Z", time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)},
		{"2026-03-14T11:00:00.5+01:00", time.Date(2026, 3, 14, 10, 0, 0, 5e8, time.UTC)},
		{"now", now},
		{"-90m", now.Add(-90 * time.Minute)},
		{"2h", now.Add(-2 * time.Hour)},
	}
	for _, tt := range tests {
		got, err := parseReportTime(tt.in, now)
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("parseReportTime(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if _, err := parseReportTime("--1h", now); err == nil {
		t.Errorf("parseReportTime(--1h) accepted")
	}
}

// A window given beyond what the database keeps is clamped, not refused or
// emptied, and --from 0001-01-01T00:00:00Z is a start like any other, not
// a missing --from blamed on --lock.
func TestReportWindowBeyondTheRange(t *testing.T) {
	db := reportDB(t)
	for _, window := range [][]string{
		{"--from", "0001-01-01T00:00:00Z", "--to", "2026-03-14T10:05:00Z"},
		{"--from", "2026-03-14T10:00:00Z", "--to", "2300-01-01T00:00:00Z"},
		{"--from", "0000-01-01T00:00:00Z", "--to", "9999-12-31T23:59:59Z"},
	} {
		t.Run(strings.Join(window, " "), func(t *testing.T) {
			code, out, stderr := runReport(t, append([]string{"--lock", "prod-etcd//locks/orders", "--database", db, "--format", "json"}, window...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var doc struct {
				From      string `json:"from"`
				To        string `json:"to"`
				Handovers int    `json:"handovers"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			if doc.Handovers != 1 || doc.From > "2026-03-14T10:00:00Z" || doc.To < "2026-03-14T10:05:00Z" {
				t.Errorf("report from %s to %s with %d handovers, want the window clamped around the one handover", doc.From, doc.To, doc.Handovers)
			}
		})
	}
	t.Run("NeitherLockNorFrom", func(t *testing.T) {
		code, _, stderr := runReport(t, "--database", db)
		if code != 2 || !strings.Contains(stderr, "--from: a start time is required") || !strings.Contains(stderr, "--lock: a lock is required") {
			t.Fatalf("exit %d, stderr %q; want exit 2 naming --lock and --from", code, stderr)
		}
	})
}

// report --database takes a postgres:// URL and reads the same report from
// it; a database without leasewatch's schema is an error naming it, and the
// report creates nothing in it.
func TestReportCommandPostgres(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).Database(t)
	store, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recordReportStory(t, store)
	q := review.Query{Window: review.Window{From: reportT0, To: reportT0.Add(5 * time.Minute)}, Locks: []string{"prod-etcd//locks/orders"}}
	r, err := review.Load(ctx, store, q)
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := review.WriteMarkdown(&want, r); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runReport(t, "--lock", "prod-etcd//locks/orders", "--database", url,
		"--from", "2026-03-14T10:00:00Z", "--to", "2026-03-14T10:05:00Z")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if out != want.String() || !strings.Contains(out, "rejected by the ledger: fencing held") {
		t.Errorf("report from PostgreSQL:\n%s\n--- want\n%s", out, want.String())
	}

	empty := pg.Get(t).Database(t)
	code, _, stderr = runReport(t, "--lock", "prod-etcd//locks/orders", "--database", empty, "--from", "-1h")
	name := empty[strings.LastIndex(empty, "/")+1 : strings.Index(empty, "?")]
	if code != 1 || !strings.Contains(stderr, "--database: open database") ||
		!strings.Contains(stderr, "database "+name+" holds no leasewatch schema") {
		t.Errorf("report on an empty database: exit %d, %s; want 1 and an error naming database %s", code, stderr, name)
	}
	if pw, _ := neturl.Parse(empty); strings.Contains(stderr, func() string { p, _ := pw.User.Password(); return p }()) {
		t.Errorf("report error shows the password: %s", stderr)
	}
	conn, err := pgx.Connect(ctx, empty)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tables int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("the report left %d tables in the empty database (%v), want none", tables, err)
	}
}
