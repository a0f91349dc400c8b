package ownership_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/ownership"
	"github.com/leasewatch/leasewatch/collectors/ownership/ownershiptest"
)

// TestOwnLockRunOutDuringTakeover: replica a owns leasewatch's own source,
// the etcd source of the ownership elections, and records its own grant of
// it. a dies: its collector stops and its connections drop, resigning
// nothing. Its lease runs out, etcd deletes its election key, and b is
// granted the source: b's recorder loads the source as a left it
// (Recorder.SetFence), and b's collector resumes from a's cursor, where it
// finds a's key deleted and its lease already gone. a's tenure had expired
// by then, so it ends expired, with a lease_expired finding, as the
// dashboard's failover shows it (docs/ha.md, "What a failover looks like").
func TestOwnLockRunOutDuringTakeover(t *testing.T) {
	t.Parallel()
	const (
		prefix = "/takeover/"
		own    = "leasewatch"
	)
	target := startEtcd(t)
	lock := ownership.EtcdSourceLock(prefix, own)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	stored := &collectortest.Sink{Source: own, Store: st} // reads the store both replicas write
	recA, recB := startReplicaRecorder(t, st, own), startReplicaRecorder(t, st, own)

	proxyA := ownershiptest.NewProxy(t, target)
	elA := newEtcdElector(t, prefix, "replica-a", proxyA.Addr(), ownershiptest.Timing)
	termA := <-campaign(t, elA, own)
	colA := ownSource(t, recA, termA, target, prefix)
	// a's collector starts after the grant: its first snapshot finds a's key.
	collectortest.Eventually(t, 10*time.Second, "a's hold of the own source stored", func() bool {
		return len(stored.Events(t, lock, audit.EventObserved, audit.EventGrant)) == 1
	})

	granted := campaign(t, newEtcdElector(t, prefix, "replica-b", target, ownershiptest.Timing), own)
	colA.Stop(t)
	proxyA.Close() // a is gone; its lease runs out, and etcd deletes its key

	var termB *ownership.Term
	select {
	case termB = <-granted:
	case <-time.After(ownershiptest.Timing.LeaseDuration + 10*time.Second):
		t.Fatal("b not granted the own source after a died")
	}
	ownSource(t, recB, termB, target, prefix)
	var ends []audit.Event
	collectortest.Eventually(t, 10*time.Second, "the end of a's tenure stored", func() bool {
		ends = stored.Events(t, lock, audit.EventRelease, audit.EventExpire)
		return len(ends) > 0
	})
	if len(ends) != 1 || ends[0].Kind != audit.EventExpire || ends[0].Token == nil || *ends[0].Token != termA.Token {
		t.Errorf("ends of the own lock = %+v, want one expire of a's token %d", ends, termA.Token)
	}
	expired := stored.Findings(t, lock, audit.FindingLeaseExpired)
	if len(expired) != 1 || !slices.Equal(expired[0].Tokens, []int64{termA.Token}) {
		t.Errorf("lease_expired findings of the own lock = %+v, want one of a's token %d", expired, termA.Token)
	}
}

// startReplicaRecorder starts one replica's recorder on st: it records only
// the sources it is granted, each loaded from st as its last owner left it.
func startReplicaRecorder(t *testing.T, st *sqlite.Store, own string) *audit.Recorder {
	t.Helper()
	rec := audit.NewRecorder(st, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{own: audit.KindEtcd}}, nil,
		audit.WithOwnership(), audit.WithTickInterval(50*time.Millisecond))
	if err := rec.Start(context.Background()); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(rec.Close)
	return rec
}

// campaign campaigns for source on el in the background; the channel gets
// the term once it is granted.
func campaign(t *testing.T, el ownership.Elector, source string) <-chan *ownership.Term {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	granted := make(chan *ownership.Term, 1)
	go func() {
		term, err := el.Campaign(ctx, source, func(bool) bool { return true })
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("campaign for %s: %v", source, err)
			}
			return
		}
		granted <- term
	}()
	return granted
}

// ownSource does what a replica does on the grant of term for leasewatch's
// own source: it moves the store's fence to the term's token, which loads
// the source, and then runs the source's collector, an etcd collector of
// the elections under prefix, until the test ends.
func ownSource(t *testing.T, rec *audit.Recorder, term *ownership.Term, target, prefix string) *collectortest.Running {
	t.Helper()
	if err := rec.SetFence(context.Background(), term.Source, term.Token); err != nil {
		t.Fatalf("SetFence(%s, %d): %v", term.Source, term.Token, err)
	}
	c, err := etcd.New(etcd.Config{Name: term.Source, Endpoints: []string{target}, Prefixes: []string{ownership.EtcdSourcesPrefix(prefix)},
		PollInterval: 200 * time.Millisecond, DialTimeout: 2 * time.Second},
		collectortest.Logger(t, term.Source), etcd.WithProgressInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return collectortest.Run(t, c, rec)
}
