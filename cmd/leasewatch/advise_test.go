package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// adviseDB records, through the real recorder into a SQLite file, half an
// hour ago, a leader with a 60 s lease renewing every second and once
// after 3 s.
func adviseDB(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lw.db")
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec := audit.NewRecorder(store, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"prod-etcd": audit.KindEtcd}}, nil)
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	base := time.Now().Add(-30 * time.Minute).UTC()
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/leader"}
	for i, s := range []int{0, 1, 2, 3, 4, 5, 6, 9} {
		kind := audit.EventRenew
		if i == 0 {
			kind = audit.EventGrant
		}
		in := audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: key, Kind: kind, At: base.Add(time.Duration(s) * time.Second), Holder: "sched-a", Token: audit.Int64(7), LeaseDuration: time.Minute}}}
		if err := rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func runAdvise(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"advise"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// Gaps of 1 s six times and 3 s once: a 60 s lease tolerates the 3 s stall
// (5.4 s would), and renewing every 10 s would do, a tenth of the writes.
func TestAdviseCommand(t *testing.T) {
	db := adviseDB(t)
	t.Run("Text", func(t *testing.T) {
		code, out, stderr := runAdvise(t, "--lock", "prod-etcd//locks/leader", "--database", db, "--window", "1h")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		text := strings.Join(strings.Fields(out), " ")
		for _, want := range []string{
			"prod-etcd//locks/leader (lock 1)",
			"7 renewals",
			"(all) 7 1s 3s 3s 3s 5.4s",
			"sched-a 7 1s 3s 3s 3s 5.4s",
			"current 1m0s not shown by the backend 1s (the median gap) 1.000",
			"suggested 1m0s 50s 10s 0.100",
			"The holders renew 10.0 times as often as the stalls need (every 1s, where 10s would do): 1.000 writes/s instead of 0.100.",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("advise output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "shorter than the longest stall") {
			t.Errorf("a 60 s lease flagged shorter than a 3 s stall:\n%s", out)
		}
	})
	t.Run("JSONByID", func(t *testing.T) {
		code, out, stderr := runAdvise(t, "--lock", "1", "--database", db, "--json", "--margin", "0", "--retries", "2")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var doc struct {
			Lock     string
			Renewals int
			Gaps     struct {
				MaxMS int64 `json:"max_ms"`
			}
			Suggested struct {
				Lease    int64 `json:"lease_duration_ms"`
				Deadline int64 `json:"renew_deadline_ms"`
				Retry    int64 `json:"retry_period_ms"`
			}
			Needed int64   `json:"needed_lease_ms"`
			Cost   float64 `json:"cost_factor"`
			Costly bool
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		// Without a margin and with two retries the 3 s stall needs 4.5 s;
		// the 60 s lease allows 20 s retries.
		s := doc.Suggested
		if doc.Lock != "/locks/leader" || doc.Renewals != 7 || doc.Gaps.MaxMS != 3000 || doc.Needed != 4500 ||
			s.Lease != 60000 || s.Deadline != 40000 || s.Retry != 20000 || doc.Cost != 20 || !doc.Costly {
			t.Errorf("advice = %+v, want a 3 s stall needing 4.5 s, 60 s / 40 s / 20 s suggested, 20 times the writes", doc)
		}
	})
}

// Each bad flag is named, exit 2 for a bad command line, 1 for a lock that
// is not there, and nothing on stdout.
func TestAdviseCommandErrors(t *testing.T) {
	db := adviseDB(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"MissingLock", []string{"--database", db}, 2, "--lock: a lock is required"},
		{"ZeroWindow", []string{"--lock", "1", "--database", db, "--window", "0s"}, 2, "--window: 0s: want a positive duration"},
		{"LongWindow", []string{"--lock", "1", "--database", db, "--window", "2209h"}, 2, "--window: 2209h0m0s: want a positive duration of at most 92 days"},
		{"BadWindow", []string{"--lock", "1", "--database", db, "--window", "a day"}, 2, `invalid value "a day" for flag -window`},
		{"NegativeMargin", []string{"--lock", "1", "--database", db, "--margin", "-0.5"}, 2, "--margin: must be from 0 to 10"},
		{"OneRetry", []string{"--lock", "1", "--database", db, "--retries", "1"}, 2, "--retries: must be from 2 to 100"},
		{"ConfigAndDatabase", []string{"--lock", "1", "--database", db, "--config", "x.yaml"}, 2, "--database: give --config or --database, not both"},
		{"UnknownLock", []string{"--lock", "prod-etcd//locks/none", "--database", db}, 1, "--lock: lock prod-etcd//locks/none not found"},
		{"MalformedLock", []string{"--lock", "leader", "--database", db}, 1, `--lock: lock "leader": want an id or SOURCE/NAME`},
		{"StrayArgument", []string{"--lock", "1", "--database", db, "extra"}, 2, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runAdvise(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.stderr)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing on error", out)
			}
		})
	}
}
