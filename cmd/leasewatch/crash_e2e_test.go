package main

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashKills is how many times TestCrashKillNineWhileBusy kills leasewatch
// in a normal test run, which it keeps within a minute on two cores;
// LEASEWATCH_CRASH_KILLS=20 is the full run, and
// LEASEWATCH_CRASH_SEED replays the kill moments of a logged seed.
const crashKills = 8

var resumedAt = regexp.MustCompile(`msg=resumed source=\S+ revision=(\d+)`)

// leasewatch is killed with SIGKILL at random moments while write reports
// pour in and etcd locks change hands many times a second, and started again
// on the same database. After every kill the database is intact, every
// report answered 202 is stored exactly once and no batch is stored in part;
// at the end every grant and release the lock clients made is recorded
// exactly once: each run resumed from the cursor the last one stored.
func TestCrashKillNineWhileBusy(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		crashKillNine(t, filepath.Join(t.TempDir(), "lw.db"), envInt(t, "LEASEWATCH_CRASH_KILLS", crashKills))
	})
	t.Run("Postgres", func(t *testing.T) {
		crashKillNine(t, pg.Get(t).Database(t), envInt(t, "LEASEWATCH_CRASH_KILLS", crashKills))
	})
}

// crashKillNine is TestCrashKillNineWhileBusy on database (a SQLite path or
// a postgres:// URL), killing leasewatch kills times.
func crashKillNine(t *testing.T, database string, kills int) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LEASEWATCH_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("LEASEWATCH_CRASH_SEED=%q: %v", s, err)
		}
	}
	t.Logf("%d kills, seed %d (LEASEWATCH_CRASH_SEED=%d replays the kill moments)", kills, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	began := time.Now()

	srv, cli := startEtcd(t)
	dir := t.TempDir()
	const source = "crash"
	config := writeServeConfig(t, dir, "127.0.0.1:0", database, source, srv.Endpoint)
	p := startServeProcess(t, config)
	base := p.waitListening(t, time.Minute)
	// Every restart listens where the first did, so clients keep one URL.
	writeServeConfig(t, dir, strings.TrimPrefix(base, "http://"), database, source, srv.Endpoint)
	waitSourceUp(t, base)

	locks := []string{"/locks/crash-0", "/locks/crash-1", "/locks/crash-2", "/locks/crash-3"}
	lc := startLockClients(cli, locks, 2)
	wr := startWriters(base, source, locks, lc, 8, 25)

	var (
		lastCursor int64
		resumed    int // restarts whose collector logged resuming from the stored cursor
		lostAcks   int // batches stored whose 202 the kill swallowed
		earlyKills int // kills before the run was known to be up
	)
	for k := 1; k <= kills; k++ {
		// Most runs get to work before they die: the collector has resumed
		// and a batch has been answered. One in four dies while it starts.
		early := k > 1 && rng.IntN(4) == 0
		if !early {
			before := wr.answered()
			eventually(t, time.Minute, fmt.Sprintf("run %d to resume and answer a batch", k), func() bool {
				return wr.answered() > before && (k == 1 || resumedAt.MatchString(p.stderr.String()))
			})
		}
		time.Sleep(time.Duration(rng.Int64N(int64(800 * time.Millisecond)))) // a random moment
		p.kill()
		if early {
			earlyKills++
		}
		acked, sending := wr.snapshot()

		// The database as the kill left it, read without writing to it.
		db := openReadOnly(t, database)
		cur, err := strconv.ParseInt(cursor(t, db, source), 10, 64)
		if err != nil {
			t.Fatalf("kill %d: stored cursor: %v", k, err)
		}
		integrityCheck(t, db)
		stored := requestIDs(t, db)
		for id := range acked {
			if stored[id] != 1 {
				t.Fatalf("kill %d: report %s was answered 202 but is stored %d times", k, id, stored[id])
			}
		}
		for id, n := range stored {
			if n != 1 {
				t.Fatalf("kill %d: report %s is stored %d times", k, id, n)
			}
		}
		for _, ids := range sending {
			n := 0
			for _, id := range ids {
				n += stored[id]
			}
			switch n {
			case 0:
			case len(ids):
				lostAcks++
			default:
				t.Fatalf("kill %d: %d of the %d reports of batch %s... are stored: a request is stored whole or not at all", k, n, len(ids), ids[0])
			}
		}
		grants, _ := transitions(t, db, source)
		for lock, tokens := range grants {
			if i := firstRepeat(tokens); i >= 0 {
				t.Fatalf("kill %d: lock %s: grant of token %d recorded twice: %v", k, lock, tokens[i], tokens)
			}
		}
		if cur < lastCursor {
			t.Fatalf("kill %d: stored cursor went back from %d to %d", k, lastCursor, cur)
		}
		db.Close()
		if m := resumedAt.FindStringSubmatch(p.stderr.String()); m != nil && k > 1 {
			if rev, _ := strconv.ParseInt(m[1], 10, 64); rev != lastCursor {
				t.Fatalf("run %d resumed from revision %d, but the cursor stored before it started was %d", k, rev, lastCursor)
			}
			resumed++
		}
		lastCursor = cur
		p = startServeProcess(t, config)
		p.waitListening(t, time.Minute)
	}

	acked, stats := wr.finish(t)
	acquired, released := lc.finish(t)
	nGrants := finalCheck(t, p, database, source, locks, acquired, released, slices.Collect(maps.Keys(acked)))
	if resumed == 0 {
		t.Errorf("no restart logged resuming from its stored cursor")
	}
	t.Logf("%d kills (%d while starting) in %s: %d reports in %d batches answered 202 and stored once (%d posts: %d refused while down, %d answers lost to a kill, %d answered 503; %d batches stored before their answer was lost); %d grants and releases recorded once; %d restarts resumed from the cursor",
		kills, earlyKills, time.Since(began).Round(time.Second), len(acked), stats.batches, stats.posts, stats.refused, stats.lost, stats.unavailable, lostAcks, nGrants, resumed)
}

// firstRepeat returns the index of the first value seen before in vs, -1 if none.
func firstRepeat(vs []int64) int {
	seen := make(map[int64]bool, len(vs))
	for i, v := range vs {
		if seen[v] {
			return i
		}
		seen[v] = true
	}
	return -1
}

// envInt reads a positive count from the environment, def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}
