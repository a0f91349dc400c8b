// Command leasewatch-load drives a real backend with lease traffic while a
// separate leasewatch process records it, and reports what leasewatch
// sustained: events recorded per second, observation lag (the holder's
// renewTime to the commit that stored it) p50/p99, the leasewatch process's
// CPU and RSS, and whether every renewal made it into the database.
//
//	leasewatch-load kubernetes [--heartbeats 2000] [--elections 50] [--duration 60s]
//	leasewatch-load kubernetes --replay [--heartbeats 130000] [--frames FILE] [--duration 60s]
//	leasewatch-load redis [--locks 10000] [--ttl 2s] [--every 500ms] [--duration 30s]
//	leasewatch-load etcd [--locks 5000] [--contenders 2] [--sessions 32] [--ttl 5s] [--hold 20s] [--duration 30s]
//	leasewatch-load zookeeper [--locks 2000] [--contenders 2] [--sessions 32] [--hold 4s] [--duration 30s]
//	leasewatch-load postgres [--locks 2500] [--rate 5000] [--renewals 3] [--writers 16] [--duration 30s]
//	leasewatch-load postgres --advisory-sessions 1000 [--hold-min 1s] [--hold-max 3s] [--poll-every 1s] [--duration 30s]
//	leasewatch-load soak [--locks 1000] [--every 500ms] [--duration 30m] [--renewals 2m] [--events 5m] [--postgres]
//	leasewatch-load ingest [--writers 200] [--browsers 50] [--duration 5m] [--write-every 500ms] [--think 1s]
//	leasewatch-load failover [--kills 20] [--every 5s] [--lease 2s] [--leases 200] [--etcd-locks 50] [--redis-locks 200] [--writers 20]
//	leasewatch-load rolling [--every 5s] [--lease 2s] [--leases 200] [--renew-every 2s]
//	leasewatch-load dbfailover [--failovers 20] [--async] [--every 5s] (and failover's load flags)
//
// The kubernetes scenario starts a real kube-apiserver on an embedded etcd
// (built from the Kubernetes Go module on first use; see
// collectors/kubernetes/kubetest), or uses --kubeconfig. With --replay it
// records that apiserver's watch of a few heartbeat Lease renewals once and
// replays the frames to leasewatch, from an HTTP/2 server over TLS of its
// own, as the heartbeats of as many Leases as asked (a 130,000-node
// cluster's 13,000 renewals a second, which a real apiserver on a small
// machine cannot write), then checks every renewal it sent was recorded
// once. The redis scenario
// starts Debian's redis-server on loopback. The etcd scenario starts an
// embedded etcd in-process and contends for concurrency.Mutex locks on it,
// comparing every grant and release its clients saw with what leasewatch
// stored; the zookeeper scenario does the same with Debian's ZooKeeper
// server and go-zookeeper's Lock, the documented lock recipe. The postgres scenario runs ShedLock's
// statements on a shedlock table that leasewatch streams by logical
// replication, logs each change in the transaction that makes it, and
// compares every change with what leasewatch stored; with
// --advisory-sessions, sessions take and release advisory locks instead,
// which leasewatch polls. The soak
// runs the redis load for a long time with short retention and samples the
// database's size, which must level off; with --postgres, leasewatch's
// database is on a PostgreSQL server of the run's own. The ingest scenario
// has many resources post fenced-write reports about etcd
// locks that change hands while people browse the dashboard, and checks that
// every report answered 202 was stored exactly once. The failover scenario
// runs two replicas on a PostgreSQL server of its own, sharing an etcd, a
// Kubernetes and a Redis source while their clients change locks and
// resources report fenced writes to either replica, and kills the owner of
// a source (kill -9) at random moments; the rolling scenario restarts each
// replica in turn instead, and the dbfailover scenario fails their
// PostgreSQL over to its streaming standby (synchronous, or --async). Each checks that every transition the clients
// logged and every report answered 202 was stored once, that no cursor
// moved back, the takeover times, and that only Redis, which cannot
// resume, has blind windows: one per handover, covering it. Each
// sends traffic only to its own backend and to leasewatch on loopback, and
// stops by itself.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: leasewatch-load kubernetes|redis|etcd|zookeeper|postgres|soak|ingest|failover|rolling|dbfailover [flags]  (-h for flags)")
		os.Exit(2)
	}
	var scenario interface {
		run(ctx context.Context, out, log io.Writer) error
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	switch os.Args[1] {
	case "kubernetes":
		var k kubeLoad
		k.flags(fs)
		scenario = &k
	case "redis":
		var r redisLoad
		r.flags(fs)
		scenario = &r
	case "etcd":
		var e etcdLoad
		e.flags(fs)
		scenario = &e
	case "soak":
		s := soak{pruneCadence: time.Minute} // leasewatch's retention pass interval
		s.flags(fs)
		scenario = &s
	case "ingest":
		var i ingestLoad
		i.flags(fs)
		scenario = &i
	case "zookeeper":
		var z zkLoad
		z.flags(fs)
		scenario = &z
	case "postgres":
		var p pgLoad
		p.flags(fs)
		scenario = &p
	case "failover", "rolling", "dbfailover":
		var f failoverLoad
		f.flags(fs, os.Args[1])
		scenario = &f
	default:
		fmt.Fprintf(os.Stderr, "leasewatch-load: unknown scenario %q: want kubernetes, redis, etcd, zookeeper, postgres, soak, ingest, failover, rolling or dbfailover\n", os.Args[1])
		os.Exit(2)
	}
	fs.StringVar(&serveCPUProfile, "cpuprofile", "", "have leasewatch write a CPU profile of its whole run to this file (leasewatch serve --cpuprofile; the binary must have the flag)")
	fs.StringVar(&serveMemProfile, "memprofile", "", "have leasewatch write a heap profile to this file when the load stops it (leasewatch serve --memprofile)")
	_ = fs.Parse(os.Args[2:])

	if err := scenario.run(ctx, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "leasewatch-load:", err)
		os.Exit(1)
	}
}

// runFolder makes the folder of a run (leasewatch's database and config):
// done removes it, unless keep, which says where it is kept instead.
func runFolder(keep bool, log io.Writer) (dir string, done func(), err error) {
	if dir, err = os.MkdirTemp("", "leasewatch-load-"); err != nil {
		return "", nil, err
	}
	if keep {
		fmt.Fprintf(log, "keeping %s\n", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// buildLeasewatch builds the leasewatch binary into dir, with any extra go
// build flags.
func buildLeasewatch(ctx context.Context, dir string, log io.Writer, flags ...string) (string, error) {
	bin := filepath.Join(dir, "leasewatch")
	args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/leasewatch/leasewatch/cmd/leasewatch")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build leasewatch: %w", err)
	}
	return bin, nil
}

// waitFor polls cond every 100ms until it holds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("waiting for %s", what))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// waitProgress polls until done, or until progress has not grown for idle:
// a backlog takes as long as it takes to work off, but one that has stopped
// moving is not going to. It returns how long it waited.
func waitProgress(ctx context.Context, idle time.Duration, check func() (done bool, progress float64)) time.Duration {
	start := time.Now()
	last, moved := -1.0, start
	for {
		done, progress := check()
		if done {
			return time.Since(start)
		}
		if progress > last {
			last, moved = progress, time.Now()
		} else if time.Since(moved) > idle {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
