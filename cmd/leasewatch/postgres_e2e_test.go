package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// retryAfter503 posts reports and returns the status and Retry-After of
// the answer.
func retryAfter503(t *testing.T, client *http.Client, base string, reports []writeReport) (int, string) {
	t.Helper()
	body, _ := json.Marshal(reports)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/writes", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testIngestToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST /api/v1/writes: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// The PostgreSQL server is killed (every process at once, as a crash would)
// while locks change hands and reports arrive, and started again. While it
// is down ingest answers 503 with Retry-After and never 202, /readyz and the
// sources API say so, and nothing of a refused request is stored. Once it is
// back everything resumes by itself: the refused batch is taken on retry,
// the collector resumes from its stored cursor, and every grant and release
// made meanwhile, still in etcd's history, is recorded exactly once.
func TestPostgresRestartPausesAndRecovers(t *testing.T) {
	pgSrv := pgtest.New(t, pgtest.Options{})
	postgresOutage(t, pgSrv.Database(t), pgSrv.Kill, func(ctx context.Context) error { return pgSrv.Restart(ctx) })
}

// A PostgreSQL failover: the primary, with a synchronous standby, is killed
// while locks change hands and reports arrive, and the standby is promoted,
// as an operator's (or Patroni's) failover does. serve, given both hosts
// with target_session_attrs=primary (docs/postgresql.md), pauses as for
// an outage and resumes on the new primary by itself, and every report it
// answered 202, before the failover or after, is there, once: a commit
// acknowledged on the primary was flushed by the standby first.
func TestPostgresFailover(t *testing.T) {
	primary := pgtest.New(t, pgtest.Options{})
	database := primary.Database(t)
	standby := pgtest.NewStandby(t, primary, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := primary.RequireSynchronousStandby(ctx); err != nil {
		t.Fatal(err)
	}
	failover, err := pgtest.FailoverURL(database, standby)
	if err != nil {
		t.Fatal(err)
	}
	postgresOutage(t, failover, primary.Kill, standby.Promote)
}

// postgresOutage runs serve on database with an etcd source while locks
// change hands and reports arrive, takes the database away with down and
// gives it back with up, and checks what an outage must leave: no 202 while
// it is down, 503 with Retry-After, /readyz, the sources API and the log
// saying so; after it, the refused batch taken on retry, the collector
// resumed, every report answered 202 and every grant and release stored
// once.
func postgresOutage(t *testing.T, database string, down func(), up func(context.Context) error) {
	t.Helper()
	const source = "pgdown"
	p, base, locks, lc := serveHandingOver(t, database, source)
	client := &http.Client{Timeout: time.Minute}
	report := func(prefix string, n int) []writeReport {
		out := make([]writeReport, n)
		for i := range out {
			out[i] = writeReport{Source: source, Lock: locks[0], Resource: "ledger", Token: int64(i + 1),
				Outcome: "accepted", RequestID: fmt.Sprintf("%s-%d", prefix, i)}
		}
		return out
	}
	var acked []string
	post := func(batch []writeReport) int {
		t.Helper()
		status, body, err := postWrites(client, base, batch)
		switch {
		case err != nil:
			t.Fatalf("POST /api/v1/writes: %v", err)
		case status == http.StatusAccepted:
			for _, r := range batch {
				acked = append(acked, r.RequestID)
			}
		case status != http.StatusServiceUnavailable:
			t.Fatalf("POST /api/v1/writes: %d %s, want 202 or 503", status, body)
		}
		return status
	}
	for i := range 5 {
		if status := post(report(fmt.Sprintf("before-%d", i), 20)); status != http.StatusAccepted {
			t.Fatalf("POST before the outage: %d, want 202", status)
		}
	}
	busy := startBusyReporter(client, base, report)
	eventually(t, 30*time.Second, "the busy client's first report to be taken", busy.taken)

	down()
	// Nothing can be durable now: not one 202 until the server is back.
	var refused []writeReport
	for i := range 20 {
		batch := report(fmt.Sprintf("down-%d", i), 20)
		if status := post(batch); status == http.StatusAccepted {
			t.Fatalf("POST while PostgreSQL is down answered 202")
		}
		refused = batch
	}
	if status, ra := retryAfter503(t, client, base, refused); status != http.StatusServiceUnavailable || ra == "" {
		t.Fatalf("POST while PostgreSQL is down: %d, Retry-After %q; want 503 with a Retry-After", status, ra)
	}
	eventually(t, 30*time.Second, "/readyz to report the database down", func() bool {
		code, body := get(t, base, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "database server")
	})
	eventually(t, 30*time.Second, "the sources API to report the paused collector", func() bool {
		state, lastErr := sourceState(t, base)
		return state == "down" && strings.Contains(lastErr, "database server")
	})
	eventually(t, 30*time.Second, "the log to say recording paused", func() bool {
		return strings.Contains(p.stderr.String(), `msg="recording paused: the store cannot take the collector's input`)
	})
	// Locks go on changing hands while the database is down; etcd keeps
	// their history for the collector to read once it can store it.
	downAt := lc.latest(locks[0])
	eventually(t, 30*time.Second, "handovers while PostgreSQL is down", func() bool { return lc.latest(locks[0]) > downAt })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := up(ctx); err != nil {
		t.Fatal(err)
	}
	acked = append(acked, takenOnRetry(t, client, base, refused, 60*time.Second)...)
	waitResumed(t, base)
	busyAcked, refusals := busy.finish(t)
	acked = append(acked, busyAcked...)
	t.Logf("the busy client's %d reports were each taken, after %d answers of 503 across the outage", len(busyAcked), refusals)
	for i := range 5 {
		post(report(fmt.Sprintf("after-%d", i), 20))
	}
	acquired, released := lc.finish(t)
	n := finalCheck(t, p, database, source, locks, acquired, released, acked)
	t.Logf("%d reports answered 202 and stored once; %d grants and releases recorded once across the outage", len(acked), n)
}

// serve started while its PostgreSQL server is down says so, naming the
// host and never the password, and tries again until the server is up;
// then it serves. Stopped while it waits, it exits cleanly.
func TestServeWaitsForPostgres(t *testing.T) {
	pgSrv := pgtest.New(t, pgtest.Options{})
	database := pgSrv.Database(t)
	password, _ := func() (string, bool) { u, _ := neturl.Parse(database); return u.User.Password() }()
	pgSrv.Kill()
	srv, _ := startEtcd(t)
	config := writeServeConfig(t, t.TempDir(), "127.0.0.1:0", database, "pgwait", srv.Endpoint)

	t.Run("StoppedWhileWaiting", func(t *testing.T) {
		p := startServeProcess(t, config)
		eventually(t, 30*time.Second, "serve to say the database is unreachable", func() bool {
			return strings.Contains(p.stderr.String(), `msg="database unreachable; retrying" host=`+pgSrv.Addr)
		})
		if err := p.interrupt(t); err != nil {
			t.Fatalf("serve stopped while waiting for the database exited with %v:\n%s", err, p.stderr.String())
		}
	})

	p := startServeProcess(t, config)
	eventually(t, 30*time.Second, "two attempts to reach the database", func() bool {
		return strings.Count(p.stderr.String(), `msg="database unreachable; retrying" host=`+pgSrv.Addr) >= 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pgSrv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	base := p.waitListening(t, time.Minute)
	waitSourceUp(t, base)
	log := p.stderr.String()
	if !strings.Contains(log, `msg="database reachable" host=`+pgSrv.Addr) {
		t.Errorf("the log does not say the database became reachable:\n%s", log)
	}
	if strings.Contains(log, password) {
		t.Errorf("the log shows the database password:\n%s", log)
	}
}

// PostgreSQL stays down while the lock backend's history moves on past the
// stored cursor: etcd compacts what the collector would have read. Once the
// server is back the collector cannot resume, and says so: a blind window
// from the stored cursor's time, a blind_window finding, and the locks as
// they are now (the lock released meanwhile no longer held, the one taken
// meanwhile held by its holder), never a silent gap.
func TestPostgresOutagePastTheHistoryIsABlindWindow(t *testing.T) {
	pgSrv := pgtest.New(t, pgtest.Options{NoFsync: true})
	database := pgSrv.Database(t)
	srv, cli := startEtcd(t)
	const source = "pgblind"
	p := startServeProcess(t, writeServeConfig(t, t.TempDir(), "127.0.0.1:0", database, source, srv.Endpoint))
	base := p.waitListening(t, time.Minute)
	waitSourceUp(t, base)

	ctx := context.Background()
	session := func() *concurrency.Session {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	gone := concurrency.NewMutex(session(), "/locks/blind-gone")
	if err := gone.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	db := openReadOnly(t, database)
	defer db.Close()
	eventually(t, 30*time.Second, "the grant recorded before the outage", func() bool {
		grants, _ := transitions(t, db, source)
		return len(grants["/locks/blind-gone"]) == 1
	})

	pgSrv.Kill()
	eventually(t, 30*time.Second, "the collector to pause", func() bool {
		state, _ := sourceState(t, base)
		return state == "down"
	})
	if err := gone.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	taken := concurrency.NewMutex(session(), "/locks/blind-new")
	if err := taken.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctx, "/unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, put.Header.Revision); err != nil {
		t.Fatal(err)
	}

	restart, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pgSrv.Restart(restart); err != nil {
		t.Fatal(err)
	}
	db2 := openReadOnly(t, database)
	defer db2.Close()
	var windows, findings int
	eventually(t, 60*time.Second, "a blind window and its finding", func() bool {
		if err := db2.QueryRow(`SELECT count(*) FROM source_blinds WHERE source = $1`, source).Scan(&windows); err != nil {
			t.Fatal(err)
		}
		if err := db2.QueryRow(`SELECT count(*) FROM findings f JOIN locks l ON l.id = f.lock_id
			WHERE l.source = $1 AND f.kind = 'blind_window'`, source).Scan(&findings); err != nil {
			t.Fatal(err)
		}
		return windows > 0 && findings > 0
	})
	state := func(name string) (st, holder string) {
		if err := db2.QueryRow(`SELECT state, holder FROM locks WHERE source = $1 AND name = $2`, source, name).Scan(&st, &holder); err != nil {
			t.Fatalf("lock %s: %v", name, err)
		}
		return st, holder
	}
	eventually(t, 30*time.Second, "the locks as they are now", func() bool {
		goneState, _ := state("/locks/blind-gone")
		newState, _ := state("/locks/blind-new")
		return goneState != "held" && newState == "held"
	})
	t.Logf("%d blind windows, %d blind_window findings after an outage past etcd's compaction", windows, findings)
	if err := p.interrupt(t); err != nil {
		t.Fatalf("serve exited with %v:\n%s", err, p.stderr.String())
	}
}

// busyReporter posts batches of reports one after another, as a resource's
// client does, retrying a batch answered 503 until it is taken: the reports
// in flight when the database goes away. A report answered 503 may have been
// stored (its commit's outcome unknown to serve); its retry, with the same
// request id, is then found already stored, and it is stored once.
type busyReporter struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	acked    []string
	refusals int
	err      error
}

func startBusyReporter(client *http.Client, base string, report func(string, int) []writeReport) *busyReporter {
	b := &busyReporter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for i := 0; ; i++ {
			select {
			case <-b.stop:
				return
			default:
			}
			if err := b.post(client, base, report(fmt.Sprintf("busy-%d", i), 5)); err != nil {
				b.mu.Lock()
				b.err = err
				b.mu.Unlock()
				return
			}
		}
	}()
	return b
}

// post posts batch until it is taken, pausing between tries as a client
// does after a 503; a stop waits for the batch in hand.
func (b *busyReporter) post(client *http.Client, base string, batch []writeReport) error {
	for {
		status, body, err := postWrites(client, base, batch)
		switch {
		case err != nil:
			return fmt.Errorf("POST /api/v1/writes: %w", err)
		case status == http.StatusAccepted:
			b.mu.Lock()
			defer b.mu.Unlock()
			for _, r := range batch {
				b.acked = append(b.acked, r.RequestID)
			}
			return nil
		case status != http.StatusServiceUnavailable:
			return fmt.Errorf("POST /api/v1/writes: %d %s, want 202 or 503", status, body)
		}
		b.mu.Lock()
		b.refusals++
		b.mu.Unlock()
		time.Sleep(50 * time.Millisecond) // a client's pause before its retry
	}
}

// taken reports whether a batch has been taken.
func (b *busyReporter) taken() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.acked) > 0
}

// finish stops the client once its batch in hand is taken and returns the
// request ids of every report taken, and how many answers were 503.
func (b *busyReporter) finish(t *testing.T) ([]string, int) {
	t.Helper()
	close(b.stop)
	select {
	case <-b.done:
	case <-time.After(time.Minute):
		t.Fatal("the busy client's last batch was not taken within a minute")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.acked, b.refusals
}
