package etcd

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// A holder's lease that runs out while no collector watches it: on coming
// back, the collector finds the owner key deleted and the lease already
// gone, so it cannot tell an expiry from a revoke. The tenure's last known
// expiry had passed by the time the deletion was seen, so the end is an
// expiry, with its lease_expired finding (docs/findings.md, "How a tenure ends").

// runOut stops s's keepalives and waits until etcd has revoked its lease,
// deleting key: the lease ran out with nobody renewing it.
func runOut(t *testing.T, cli *clientv3.Client, s *concurrency.Session, key string) {
	t.Helper()
	s.Orphan()
	collectortest.Eventually(t, 10*time.Second, "the orphaned lease to run out", func() bool {
		resp, err := cli.Get(context.Background(), key)
		return err == nil && len(resp.Kvs) == 0
	})
}

// checkRanOut fails the test unless ends, the end events of the tenure of
// token tok, are one expire and lease_expired, the findings of that kind,
// name tok once.
func checkRanOut(t *testing.T, ends []audit.Event, expired []audit.Finding, tok int64) {
	t.Helper()
	if len(ends) != 1 || ends[0].Kind != audit.EventExpire {
		t.Errorf("ends of token %d = %+v, want one expire", tok, ends)
	}
	n := 0
	for _, f := range expired {
		if slices.Equal(f.Tokens, []int64{tok}) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d lease_expired findings of token %d (all: %+v), want 1", n, tok, expired)
	}
}

// endsOf returns the end events the tracker made of lock's tenure of token
// tok, in order.
func (r *recorder) endsOf(lock string, tok int64) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.events {
		if e.Lock.Name == lock && (e.Kind == audit.EventRelease || e.Kind == audit.EventExpire) && e.Token != nil && *e.Token == tok {
			out = append(out, e)
		}
	}
	return out
}

// TestLeaseRunOutWhileStopped: the collector stops, the holder's lease runs
// out, and the collector resumes from its cursor (as the Runner resumes a
// failed run) with the tracker that recorded the grant.
func TestLeaseRunOutWhileStopped(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	cr := runCollector(t, ep, sink, "/locks/")

	s := newSession(t, cli, 2)
	m := lockMutex(t, s, "/locks/r")
	tok := token(t, cli, m.Key())
	sink.waitObs(t, 5*time.Second, "/locks/r", 1, audit.EventGrant)
	sink.waitCursor(t, head(t, cli))
	cr.Stop(t)

	runOut(t, cli, s, m.Key())
	runCollector(t, ep, sink, "/locks/")
	sink.waitObs(t, 10*time.Second, "/locks/r", 1, audit.EventRelease, audit.EventExpire)
	checkRanOut(t, sink.endsOf("/locks/r", tok), sink.findingsOf(audit.FindingLeaseExpired), tok)
	if st := sink.state("/locks/r"); len(st.Recent) != 1 || st.Recent[0].End != audit.EndExpired {
		t.Errorf("tenures of /locks/r = %+v, want the one, ended expired", st.Recent)
	}
}

// TestLeaseRunOutWhileLeasewatchStopped: leasewatch stops (recorder and
// store closed), the holder's lease runs out, and leasewatch starts again on
// the same store, its tracker restored from it.
func TestLeaseRunOutWhileLeasewatchStopped(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := collectortest.NewSink(t, testSource, audit.KindEtcd)
	cr := runCollector(t, ep, sink, "/locks/")

	s := newSession(t, cli, 2)
	m := lockMutex(t, s, "/locks/s")
	tok := token(t, cli, m.Key())
	collectortest.Eventually(t, 5*time.Second, "the grant stored", func() bool {
		return len(sink.Events(t, "/locks/s", audit.EventGrant)) == 1
	})
	cr.Stop(t)
	sink.Close()

	runOut(t, cli, s, m.Key())
	restarted := collectortest.NewSink(t, testSource, audit.KindEtcd, collectortest.AtPath(sink.Path))
	runCollector(t, ep, restarted, "/locks/")
	var ends []audit.Event
	collectortest.Eventually(t, 10*time.Second, "the end of /locks/s stored", func() bool {
		ends = restarted.Events(t, "/locks/s", audit.EventRelease, audit.EventExpire)
		return len(ends) > 0
	})
	checkRanOut(t, ends, restarted.Findings(t, "/locks/s", audit.FindingLeaseExpired), tok)
}
