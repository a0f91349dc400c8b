// Command leasewatch-load drives a real backend with lease traffic while a
// separate leasewatch process records it, and reports what leasewatch
// sustained: events recorded per second, observation lag (the holder's
// renewTime to the commit that stored it) p50/p99, the leasewatch process's
// CPU and RSS, and whether every renewal made it into the database.
//
//	leasewatch-load kubernetes [--heartbeats 2000] [--elections 50] [--duration 60s]
//
// The kubernetes scenario starts a real kube-apiserver on an embedded etcd
// (built from the Kubernetes Go module on first use; see
// collectors/kubernetes/kubetest), or uses --kubeconfig. It sends traffic only
// to that apiserver and to leasewatch on loopback, and stops by itself.
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
	if len(os.Args) < 2 || os.Args[1] != "kubernetes" {
		fmt.Fprintln(os.Stderr, "usage: leasewatch-load kubernetes [flags]  (-h for flags)")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("kubernetes", flag.ExitOnError)
	var cfg kubeLoad
	fs.IntVar(&cfg.heartbeats, "heartbeats", 2000, "heartbeat Leases in kube-node-lease")
	fs.DurationVar(&cfg.heartbeatEvery, "heartbeat-every", 10*time.Second, "renewal period of each heartbeat Lease")
	fs.IntVar(&cfg.elections, "elections", 50, "leader-election Leases")
	fs.DurationVar(&cfg.electionEvery, "election-every", 2*time.Second, "renewal period of each election Lease")
	fs.DurationVar(&cfg.warmup, "warmup", 15*time.Second, "load before measuring")
	fs.DurationVar(&cfg.duration, "duration", 60*time.Second, "measured load")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "use this cluster instead of starting a test apiserver")
	fs.StringVar(&cfg.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	_ = fs.Parse(os.Args[2:])

	if err := cfg.run(ctx, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "leasewatch-load:", err)
		os.Exit(1)
	}
}

// buildLeasewatch builds the leasewatch binary into dir.
func buildLeasewatch(ctx context.Context, dir string, log io.Writer) (string, error) {
	bin := filepath.Join(dir, "leasewatch")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/leasewatch/leasewatch/cmd/leasewatch")
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
