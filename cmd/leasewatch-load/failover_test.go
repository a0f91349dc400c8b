package main

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// replicaBinary is leasewatch built once for the replicated scenarios'
// tests, with the race detector when they run with it.
var replicaBinary struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	log  syncBuffer
}

func replicaBin(t *testing.T) string {
	t.Helper()
	replicaBinary.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		replicaBinary.dir, replicaBinary.err = os.MkdirTemp("", "leasewatch-replicas-")
		if replicaBinary.err == nil {
			replicaBinary.bin, replicaBinary.err = buildLeasewatch(ctx, replicaBinary.dir, &replicaBinary.log, raceFlags()...)
		}
	})
	if replicaBinary.err != nil {
		t.Fatalf("build leasewatch: %v\n%s", replicaBinary.err, replicaBinary.log.String())
	}
	return replicaBinary.bin
}

// runReplicated runs k at the size the test gives it, on the package's
// kube-apiserver, and fails with what fell short and the replicas' log.
func runReplicated(t *testing.T, k failoverLoad) {
	t.Helper()
	k.replicas, k.lease = 2, 2*time.Second
	k.kubeconfig, k.leasewatch = cluster.Get(t).Kubeconfig, replicaBin(t)
	k.etcdLocks, k.hold = 10, 2*time.Second
	k.redisLocks, k.extend = 50, 500*time.Millisecond
	k.writers, k.writeEvery = 4, 300*time.Millisecond
	k.every, k.seed = 2*time.Second, 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var log syncBuffer
	res, err := k.execute(ctx, &log)
	if err == nil {
		err = k.check(res)
	}
	if res != nil {
		var table bytes.Buffer
		k.write(&table, res)
		t.Log(table.String())
	}
	if err != nil {
		t.Fatalf("%v\nlog of the run (last 30,000 bytes):\n%s", err, tail(log.String(), 30000))
	}
}

// Two replicas share an etcd, a Kubernetes and a Redis source while their
// clients change locks and resources report writes to either replica; the
// owner of a source is killed (kill -9) eight times at random moments and
// started again. Every grant and release the etcd clients logged and every
// Lease write the apiserver committed is stored once, every report answered
// 202 is stored once, no cursor moves back, each takeover is within the
// ownership lease plus 2 s, etcd and Kubernetes resume with no blind
// window, and each of Redis's handovers has the one blind window that
// covers it.
func TestFailoverKillsOwners(t *testing.T) {
	runReplicated(t, failoverLoad{kills: 8, leases: 50, renewEvery: 2 * time.Second,
		replicaOptions: replicaOptions{namespace: "failover"}})
}

// Both replicas are restarted, one after the other, while 200 Leases renew
// every 2 s: no renewal is missed, and the etcd and Kubernetes sources
// have no blind window.
func TestRollingRestartMissesNoRenewal(t *testing.T) {
	runReplicated(t, failoverLoad{rolling: true, leases: 200, renewEvery: 2 * time.Second,
		replicaOptions: replicaOptions{namespace: "rolling"}})
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
