package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
// shared PostgreSQL database, two etcd sources on endpoint, and ownership
// elected on the same etcd; then the extra top-level sections.
func writeReplicaConfig(t *testing.T, database, endpoint, identity string, extra ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasewatch.yaml")
	config := fmt.Sprintf(`listen: 127.0.0.1:0
database: %q
ingest_tokens: [%q]
sources:
  - name: alpha
    kind: etcd
    endpoints: [%[3]q]
    prefixes: ["/locks/alpha/"]
  - name: beta
    kind: etcd
    endpoints: [%[3]q]
    prefixes: ["/locks/beta/"]
replication:
  backend: etcd
  endpoints: [%[3]q]
  identity: %s
  lease_duration: %s
  renew_deadline: 1500ms
  retry_period: 300ms
`, database, testIngestToken, endpoint, identity, replicaLease) + strings.Join(extra, "")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sourceStates returns the state of every source of the service at base.
func sourceStates(t *testing.T, base string) map[string]string {
	t.Helper()
	var resp struct {
		Sources []struct{ Name, State string }
	}
	getJSON(t, base, "/api/v1/sources", &resp)
	out := make(map[string]string, len(resp.Sources))
	for _, s := range resp.Sources {
		out[s.Name] = s.State
	}
	return out
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

// startReplicas starts two replicas on database and etcd at endpoint and
// waits until each runs one of the two sources; up gives each source's
// replica.
func startReplicas(t *testing.T, database, endpoint string) (procs []*serveProcess, bases []string, up map[string][]int) {
	t.Helper()
	procs = make([]*serveProcess, 2)
	bases = make([]string, 2)
	for i := range procs {
		procs[i] = startServeProcess(t, writeReplicaConfig(t, database, endpoint, fmt.Sprintf("replica-%d", i)))
		bases[i] = procs[i].waitListening(t, time.Minute)
	}
	eventually(t, 30*time.Second, "one source up on each replica, in standby on the other", func() bool {
		var clean bool
		up, clean = owners(t, bases)
		return clean && len(up["alpha"]) == 1 && len(up["beta"]) == 1 && up["alpha"][0] != up["beta"][0]
	})
	return procs, bases, up
}

// Two replicas share two sources on one PostgreSQL store: each source runs
// on exactly one replica and is in standby on the other, one each once both
// are up; after a kill -9 of one, the other runs both within the bound.
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
		return states["alpha"] == "up" && states["beta"] == "up"
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
	recorded := func() (int, int) {
		grants, releases := transitions(t, db, "alpha")
		var g, r int
		for _, ts := range grants {
			g += len(ts)
		}
		for _, ts := range releases {
			r += len(ts)
		}
		return g, r
	}
	eventually(t, 30*time.Second, "the survivor to record the handovers", func() bool {
		g, r := recorded()
		return g == handovers && r == handovers
	})

	if err := procs[zombie].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	eventually(t, replicaTakeoverBound, "the zombie to stop alpha's collector", func() bool {
		return sourceStates(t, bases[zombie])["alpha"] != "up"
	})
	t.Logf("the zombie stopped alpha's collector %s after it resumed", time.Since(resumed).Round(time.Millisecond))
	// The zombie's log says why, and nothing of its landed.
	eventually(t, 10*time.Second, "the zombie's log to say alpha is lost", func() bool {
		return lostAlpha.MatchString(procs[zombie].stderr.String())
	})
	if g, r := recorded(); g != handovers || r != handovers {
		t.Errorf("after the zombie resumed: %d grants and %d releases stored, want %d each, once", g, r, handovers)
	}
}
