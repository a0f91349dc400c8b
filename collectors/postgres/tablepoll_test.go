package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors/ownership/ownershiptest"
)

// noopArgs and noopWorker give the River clients a worker: River runs a
// leader elector only in a client that works jobs.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverClient is one River client, connected through a proxy of its own
// so that the test can cut it off as if its process had died.
type riverClient struct {
	id     string
	proxy  *ownershiptest.Proxy
	client *river.Client[pgx.Tx]
}

// startRiverClient starts a River client named id on the database at url.
func startRiverClient(t *testing.T, srv *pgtest.Server, url, id string) *riverClient {
	t.Helper()
	proxy := ownershiptest.NewProxy(t, srv.Addr)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:      id,
		Logger:  slog.New(slog.DiscardHandler),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.WithoutCancel(t.Context())); err != nil {
		t.Fatalf("start River client %s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.StopAndCancel(ctx)
		pool.Close()
	})
	return &riverClient{id: id, proxy: proxy, client: client}
}

// observations runs a poller of the table and hands over what it observes.
type observations struct {
	ch   chan audit.Observation
	seen []audit.Observation
}

// pollTable starts p on db until the test ends.
func pollTable(t *testing.T, p *Poller, db DB) *observations {
	t.Helper()
	o := &observations{ch: make(chan audit.Observation, 1024)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, db, func(_ context.Context, b Batch) error {
			for _, ob := range b.Observations {
				o.ch <- ob
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("poller: %v", err)
		}
	})
	return o
}

// next waits up to budget for an observation that pred accepts, keeping
// every observation on the way, and fails the test, listing them, if none
// comes.
func (o *observations) next(t *testing.T, budget time.Duration, what string, pred func(audit.Observation) bool) audit.Observation {
	t.Helper()
	deadline := time.After(budget)
	for {
		select {
		case ob := <-o.ch:
			o.seen = append(o.seen, ob)
			if pred(ob) {
				return ob
			}
		case <-deadline:
			t.Fatalf("no %s within %s; observed:\n%s", what, budget, o.story())
		}
	}
}

// story lists what o has seen, one observation a line.
func (o *observations) story() string {
	s := ""
	for _, ob := range o.seen {
		s += fmt.Sprintf("  %s %s %s at=%s renewed=%s lease=%s inferred=%v\n", ob.Kind, ob.Lock.Name, ob.Holder,
			ob.At.Format(time.RFC3339Nano), ob.RenewedAt.Format(time.RFC3339Nano), ob.LeaseDuration, ob.Inferred)
	}
	return s
}

// TestPollRiverLeaderElection runs three River clients electing a leader
// (River's own elector: re-elected every 5 s, 15 s TTL, neither
// configurable) and polls river_leader. The leader is cut off as if its
// process died, so it cannot resign: a follower takes over once its lease
// ran out. The new leader then stops cleanly and resigns: a release, and
// the last client takes over at once.
func TestPollRiverLeaderElection(t *testing.T) {
	srv, url, pool := riverDatabase(t)
	ctx := t.Context()
	preset, _ := LookupPreset("river_leader")
	p, err := NewPoller(preset.Mapping, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	obs := pollTable(t, p, pool)
	clients := map[string]*riverClient{}
	for i := range 3 {
		id := fmt.Sprintf("client-%d", i)
		clients[id] = startRiverClient(t, srv, url, id)
	}
	const lock = "river_leader/default"
	first := obs.next(t, 15*time.Second, "first leader", func(ob audit.Observation) bool {
		return ob.Kind == audit.EventGrant || ob.Kind == audit.EventObserved
	})
	if first.Lock.Name != lock || clients[first.Holder] == nil || first.Token != nil || first.LeaseDuration <= 0 {
		t.Fatalf("first grant: %+v; want one of the clients on %s, unfenced, with a lease", first, lock)
	}
	renewal := obs.next(t, 15*time.Second, "renewal of "+first.Holder, func(ob audit.Observation) bool {
		return ob.Kind == audit.EventRenew
	})
	if renewal.Holder != first.Holder {
		t.Fatalf("renewal by %s, want the leader %s", renewal.Holder, first.Holder)
	}
	lastExpiry := renewal.At.Add(renewal.LeaseDuration)

	// The leader's connections drop and it reaches the database no more:
	// it cannot resign.
	clients[first.Holder].proxy.Close()
	takeover := obs.next(t, 40*time.Second, "takeover", func(ob audit.Observation) bool {
		if ob.Kind == audit.EventRenew && ob.Holder == first.Holder {
			lastExpiry = ob.At.Add(ob.LeaseDuration)
		}
		return ob.Kind == audit.EventGrant
	})
	for _, ob := range obs.seen {
		if ob.Kind == audit.EventRelease {
			t.Fatalf("a release of the cut-off leader, which could not resign:\n%s", obs.story())
		}
	}
	if takeover.Holder == first.Holder || clients[takeover.Holder] == nil {
		t.Fatalf("takeover by %q, want another client", takeover.Holder)
	}
	if takeover.RenewedAt.Before(lastExpiry) {
		t.Errorf("new leader elected at %s, before the old lease ran out at %s", takeover.RenewedAt, lastExpiry)
	}

	// The new leader stops cleanly: River deletes its row, and the last
	// client, woken by River's notification, inserts its own within 50 ms,
	// mostly before the next read: the release is inferred from the new
	// leader's elected_at, before the old lease ran out.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := clients[takeover.Holder].client.Stop(stopCtx); err != nil {
		t.Fatalf("stop %s: %v", takeover.Holder, err)
	}
	release := obs.next(t, 10*time.Second, "resignation", func(ob audit.Observation) bool { return ob.Kind != audit.EventRenew })
	if release.Kind != audit.EventRelease || release.Holder != takeover.Holder {
		t.Fatalf("after a clean stop: %s by %s, want a release by %s\n%s", release.Kind, release.Holder, takeover.Holder, obs.story())
	}
	last := obs.next(t, 15*time.Second, "last client's grant", func(ob audit.Observation) bool { return ob.Kind == audit.EventGrant })
	if last.Holder == first.Holder || last.Holder == takeover.Holder {
		t.Fatalf("grant to %s after the resignation, want the third client", last.Holder)
	}
	t.Logf("observed:\n%s", obs.story())
}

// riverDatabase starts a server with a database migrated by River's own
// migrations, and returns a pool on it, closed after the test's other
// cleanups.
func riverDatabase(t *testing.T) (*pgtest.Server, string, *pgxpool.Pool) {
	t.Helper()
	srv := pgtest.New(t, pgtest.Options{NoFsync: true})
	url := srv.Database(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("River's migrations: %v", err)
	}
	var persistence string
	if err := pool.QueryRow(ctx, "SELECT relpersistence FROM pg_class WHERE relname = 'river_leader'").Scan(&persistence); err != nil || persistence != "u" {
		t.Fatalf("river_leader relpersistence = %q, %v; want u (UNLOGGED), why it is polled", persistence, err)
	}
	return srv, url, pool
}

// TestXminIsNoToken shows why a polled row's xmin cannot stand in for the
// commit LSN as a token: a transaction ID is assigned at a transaction's
// first write, so one that began writing earlier and updates the row last
// leaves it a lower xmin than the update before.
func TestXminIsNoToken(t *testing.T) {
	srv := pgtest.New(t, pgtest.Options{NoFsync: true})
	url := srv.Database(t)
	ctx := t.Context()
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	a, b := conn(), conn()
	xmin := func() int64 {
		var x int64
		if err := a.QueryRow(ctx, "SELECT xmin::text::bigint FROM lease WHERE name = 'job'").Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	exec := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(a, "CREATE TABLE lease (name text PRIMARY KEY, holder text); CREATE TABLE other (n int); INSERT INTO lease VALUES ('job', 'x')")
	exec(a, "BEGIN")
	exec(a, "INSERT INTO other VALUES (1)") // a's transaction ID is assigned here
	exec(b, "UPDATE lease SET holder = 'b' WHERE name = 'job'")
	afterB := xmin()
	exec(a, "UPDATE lease SET holder = 'a' WHERE name = 'job'")
	exec(a, "COMMIT")
	if afterA := xmin(); afterA >= afterB {
		t.Fatalf("xmin after a's later update = %d, after b's = %d: want it lower", afterA, afterB)
	}
}
