package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// Ownership leases of the replication tests: short, so a takeover is quick.
const (
	replicaLease = 2 * time.Second
	// A dead replica's sources must be up on another within the lease
	// plus 2 s (issue's bound); the rest is for a machine busy with the
	// suite, and the new collector's first snapshot.
	replicaTakeoverBound = replicaLease + 2*time.Second + 3*time.Second
)

// writeReplicaConfig writes the configuration of replica identity: the
// shared PostgreSQL database, two etcd sources (alpha and beta) on endpoint,
// and ownership elected on the same etcd; then the extra top-level sections.
func writeReplicaConfig(t *testing.T, database, endpoint, identity string, extra ...string) string {
	t.Helper()
	return writeShardConfig(t, database, endpoint, identity, []string{"alpha", "beta"}, extra...)
}

// writeShardConfig writes the configuration of replica identity as
// writeReplicaConfig does, with one etcd source per name in sources, each
// watching the prefix /locks/NAME/.
func writeShardConfig(t *testing.T, database, endpoint, identity string, sources []string, extra ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasewatch.yaml")
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\ndatabase: %q\ningest_tokens: [%q]\nsources:\n", database, testIngestToken)
	for _, name := range sources {
		fmt.Fprintf(&b, "  - name: %s\n    kind: etcd\n    endpoints: [%q]\n    prefixes: [%q]\n", name, endpoint, "/locks/"+name+"/")
	}
	fmt.Fprintf(&b, `replication:
  backend: etcd
  endpoints: [%q]
  identity: %s
  lease_duration: %s
  renew_deadline: 1500ms
  retry_period: 300ms
`, endpoint, identity, replicaLease)
	config := b.String() + strings.Join(extra, "")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sourceStates returns the state of every source of the service at base.
func sourceStates(t *testing.T, base string) map[string]string {
	t.Helper()
	states, err := readSourceStates(base)
	if err != nil {
		t.Fatal(err)
	}
	return states
}

// readSourceStates is sourceStates for a goroutine of its own: it returns
// the error rather than failing the test.
func readSourceStates(base string) (map[string]string, error) {
	var resp struct {
		Sources []struct{ Name, State string }
	}
	if err := fetchJSON(base, "/api/v1/sources", &resp); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(resp.Sources))
	for _, s := range resp.Sources {
		out[s.Name] = s.State
	}
	return out, nil
}

// owners returns, per source, the replicas (by index) on which it is up,
// and whether every other replica has it in standby.
func owners(t *testing.T, bases []string) (map[string][]int, bool) {
	t.Helper()
	up := map[string][]int{}
	clean := true
	for i, base := range bases {
		for name, state := range sourceStates(t, base) {
			switch state {
			case "up":
				up[name] = append(up[name], i)
			case "standby":
			default:
				clean = false // down: taking over, or failing
			}
		}
	}
	return up, clean
}

// spread returns how many of shared each replica of live runs, and whether
// each of shared is up on exactly one of live and each of live runs at
// least low and at most ceil(shared / live).
func spread(up map[string][]int, shared []string, live []int, low int) (map[int]int, bool) {
	held := make(map[int]int, len(live))
	for _, i := range live {
		held[i] = 0
	}
	ok := true
	for _, name := range shared {
		if len(up[name]) != 1 {
			ok = false
			continue
		}
		if _, isLive := held[up[name][0]]; !isLive {
			ok = false
		}
		held[up[name][0]]++
	}
	share := (len(shared) + len(live) - 1) / len(live)
	for _, i := range live {
		ok = ok && held[i] >= low && held[i] <= share
	}
	return held, ok
}

// startReplicas starts two replicas on database and etcd at endpoint, with
// the sources alpha and beta, and waits until each runs one or two of the
// three shared sources; up gives each source's replica.
func startReplicas(t *testing.T, database, endpoint string) (procs []*serveProcess, bases []string, up map[string][]int) {
	t.Helper()
	_, procs, bases, up = startShards(t, database, endpoint, 2, []string{"alpha", "beta"})
	return procs, bases, up
}

// startShards starts n replicas (identities replica-0 …) on database and
// etcd at endpoint, sharing an etcd source per name in sources, and waits
// until each of them and leasewatch's own is up on exactly one replica and
// in standby on the others, and each replica runs at least one and at most
// its share. configs are the replicas' configuration files.
func startShards(t *testing.T, database, endpoint string, n int, sources []string) (configs []string, procs []*serveProcess, bases []string, up map[string][]int) {
	t.Helper()
	configs = make([]string, n)
	procs = make([]*serveProcess, n)
	bases = make([]string, n)
	for i := range procs {
		configs[i] = writeShardConfig(t, database, endpoint, fmt.Sprintf("replica-%d", i), sources)
		procs[i] = startServeProcess(t, configs[i])
		bases[i] = procs[i].waitListening(t, time.Minute)
	}
	shared := append(slices.Clone(sources), "leasewatch")
	live := make([]int, n)
	for i := range live {
		live[i] = i
	}
	eventually(t, 30*time.Second, "each source up on one replica, in standby on the others, and each replica running its share", func() bool {
		var clean bool
		up, clean = owners(t, bases)
		_, fair := spread(up, shared, live, 1)
		return clean && fair
	})
	return configs, procs, bases, up
}

// Two replicas share three sources on one PostgreSQL store (two configured,
// and leasewatch's own): each source runs on exactly one replica and is in
// standby on the other, and each replica runs some; after a kill -9 of one,
// the other runs them all within the bound.
func TestReplicasShareSourcesAndTakeOver(t *testing.T) {
	database := pg.Get(t).Database(t)
	etcdSrv, _ := startEtcd(t)
	procs, bases, up := startReplicas(t, database, etcdSrv.Endpoint)

	victim := up["alpha"][0]
	survivor := 1 - victim
	procs[victim].kill()
	killed := time.Now()
	eventually(t, replicaTakeoverBound, "the survivor to run both sources", func() bool {
		states := sourceStates(t, bases[survivor])
		return states["alpha"] == "up" && states["beta"] == "up" && states["leasewatch"] == "up"
	})
	t.Logf("takeover after kill -9: %s (bound %s)", time.Since(killed).Round(time.Millisecond), replicaTakeoverBound)
}

var lostAlpha = regexp.MustCompile(`msg="source lost: its collector is stopped".* source=alpha\b`)

// A replica paused past its ownership lease (SIGSTOP) is a zombie: the
// other takes its source over and records what happens meanwhile. Resumed
// (SIGCONT), the zombie finds its term lost and stops the source's
// collector, and nothing it had read lands in the store: every grant and
// release made during the pause is stored exactly once.
func TestZombieReplicaCommitsNothing(t *testing.T) {
	database := pg.Get(t).Database(t)
	etcdSrv, cli := startEtcd(t)
	procs, bases, up := startReplicas(t, database, etcdSrv.Endpoint)
	zombie := up["alpha"][0]
	survivor := 1 - zombie
	if err := procs[zombie].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, replicaTakeoverBound, "the survivor to take alpha over", func() bool {
		return sourceStates(t, bases[survivor])["alpha"] == "up"
	})

	// Handovers on alpha while the zombie sleeps: its watch still holds
	// them for when it wakes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const handovers = 3
	for range handovers {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			t.Fatal(err)
		}
		m := concurrency.NewMutex(sess, "/locks/alpha/job")
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		sess.Close()
	}
	db := openReadOnly(t, database)
	recorded := func() (int, int) { return storedTransitions(t, db, "alpha") }
	eventually(t, 30*time.Second, "the survivor to record the handovers", func() bool {
		g, r := recorded()
		return g == handovers && r == handovers
	})

	if err := procs[zombie].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	// The zombie's log says it stopped alpha's collector, and why. Its
	// sources page is no witness: back among the members, the zombie may
	// be handed alpha again at once (the survivor resigns what is over its
	// share), under a new token, within a poll of the page.
	eventually(t, replicaTakeoverBound, "the zombie's log to say alpha is lost and its collector stopped", func() bool {
		return lostAlpha.MatchString(procs[zombie].stderr.String())
	})
	t.Logf("the zombie stopped alpha's collector within %s after it resumed", time.Since(resumed).Round(time.Millisecond))
	// Nothing of what the zombie had read landed.
	if g, r := recorded(); g != handovers || r != handovers {
		t.Errorf("after the zombie resumed: %d grants and %d releases stored, want %d each, once", g, r, handovers)
	}
	checkZombieShows(t, bases, up, zombie)
}

// storedTransitions returns how many grants and releases the store holds
// for source, over all its locks (transitions).
func storedTransitions(t *testing.T, db querier, source string) (grants, releases int) {
	t.Helper()
	g, r := transitions(t, db, source)
	for _, ts := range g {
		grants += len(ts)
	}
	for _, ts := range r {
		releases += len(ts)
	}
	return grants, releases
}

// checkZombieShows checks that the zombie's last write of each source it
// owned, refused, is a stale write to the store on leasewatch's own lock of
// that source, as every replica shows it. up is who ran each source before.
func checkZombieShows(t *testing.T, bases []string, up map[string][]int, zombie int) {
	t.Helper()
	owned := 0
	for _, replicas := range up {
		if replicas[0] == zombie {
			owned++
		}
	}
	type staleWrite struct {
		apiFinding
		LockID   int64  `json:"lock_id"`
		LockName string `json:"lock_name"`
	}
	for _, base := range bases {
		var stale []staleWrite
		eventually(t, 20*time.Second, "a stale_write to the store on leasewatch's own lock of each source the zombie owned", func() bool {
			var findings struct{ Findings []staleWrite }
			getJSON(t, base, "/api/v1/findings?kind=stale_write&source=leasewatch", &findings)
			stale = findings.Findings
			return len(stale) >= owned
		})
		for _, f := range stale {
			if f.Resource != "store" || !strings.HasPrefix(f.LockName, "/leasewatch/ownership/sources/") {
				t.Errorf("stale write on leasewatch's own lock %q to %q, want an ownership lock and store", f.LockName, f.Resource)
			}
			// The lock the collector recorded: the zombie's tenure, then the survivor's.
			var tenures struct{ Tenures []apiTenure }
			getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d/tenures", f.LockID), &tenures)
			if len(tenures.Tenures) < 2 {
				t.Errorf("ownership lock %s has %d tenures, want the handover's two", f.LockName, len(tenures.Tenures))
			}
		}
		if len(stale) != owned {
			t.Errorf("stale writes on leasewatch's own source = %+v, want %d, one per source the zombie owned", stale, owned)
		}
	}
}

// renewedAt returns when the service at base last saw source's lock name
// renewed, zero if it has no such lock.
func renewedAt(t *testing.T, base, source, name string) time.Time {
	t.Helper()
	var resp struct {
		Locks []struct {
			Name      string    `json:"name"`
			RenewedAt time.Time `json:"renewed_at"`
		}
	}
	getJSON(t, base, "/api/v1/locks?source="+source, &resp)
	for _, l := range resp.Locks {
		if l.Name == name {
			return l.RenewedAt
		}
	}
	return time.Time{}
}

// Every replica serves the state the owner of a source has, renewals not
// yet in the lock rows included, within a second: the owner writes them
// into the rows every 500 ms.
func TestReplicasServeTheOwnersState(t *testing.T) {
	database := pg.Get(t).Database(t)
	etcdSrv, cli := startEtcd(t)
	_, bases, up := startReplicas(t, database, etcdSrv.Endpoint)
	owner := up["alpha"][0]
	other := 1 - owner

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// 5 s: the collector reads lease TTLs in whole seconds, and sees a
	// keepalive every third of it as a renewal.
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5), concurrency.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := concurrency.NewMutex(sess, "/locks/alpha/job").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const lock = "/locks/alpha/job"
	// Renewals move renewed_at on the owner; each must reach the other
	// replica's pages within the second.
	first := time.Time{}
	eventually(t, 20*time.Second, "the owner to see the lock renewed", func() bool {
		first = renewedAt(t, bases[owner], "alpha", lock)
		return !first.IsZero()
	})
	var worst time.Duration
	for range 5 {
		var at time.Time
		eventually(t, 10*time.Second, "the owner to see the lock renewed again", func() bool {
			at = renewedAt(t, bases[owner], "alpha", lock)
			return at.After(first)
		})
		first = at
		start := time.Now()
		eventually(t, 5*time.Second, "the other replica to serve the owner's renewal", func() bool {
			return !renewedAt(t, bases[other], "alpha", lock).Before(at)
		})
		worst = max(worst, time.Since(start))
	}
	t.Logf("the other replica served each of 5 renewals at most %s after the owner did", worst.Round(time.Millisecond))
	if worst > time.Second {
		t.Errorf("the other replica served a renewal %s after the owner, want within 1s", worst)
	}
}
