package etcd

import (
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func eventsAt(revs ...int64) clientv3.WatchResponse {
	wr := clientv3.WatchResponse{Header: &pb.ResponseHeader{Revision: revs[len(revs)-1]}}
	for _, r := range revs {
		wr.Events = append(wr.Events, &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(fmt.Sprint(r)), ModRevision: r}})
	}
	return wr
}

func progressAt(rev int64) clientv3.WatchResponse {
	return clientv3.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}}
}

func revsOf(steps []step) string {
	var out []string
	for _, s := range steps {
		out = append(out, fmt.Sprintf("%d:%d", s.rev, len(s.events)))
	}
	return fmt.Sprint(out)
}

func TestMerger(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	t.Run("OneWatchReleasesAtOnce", func(t *testing.T) {
		m := newMerger(1, 4)
		m.add(0, eventsAt(5, 5, 7), t0)
		steps, h := m.take(4)
		if revsOf(steps) != "[5:2 7:1]" || h != 7 || m.stalled() {
			t.Fatalf("steps %s horizon %d stalled %v, want [5:2 7:1] 7 false", revsOf(steps), h, m.stalled())
		}
	})
	t.Run("WaitsForTheQuietWatch", func(t *testing.T) {
		m := newMerger(2, 4)
		m.add(0, eventsAt(6, 9), t0)
		if steps, h := m.take(4); len(steps) != 0 || h != 4 || !m.stalled() {
			t.Fatalf("before watch 1 reports: steps %s horizon %d stalled %v, want none, 4, stalled", revsOf(steps), h, m.stalled())
		}
		m.add(1, eventsAt(8), t0)
		steps, h := m.take(4)
		if revsOf(steps) != "[6:1 8:1]" || h != 8 || !m.stalled() {
			t.Fatalf("steps %s horizon %d, want [6:1 8:1] 8 with 9 still held", revsOf(steps), h)
		}
		m.add(1, progressAt(12), t0)
		steps, h = m.take(8)
		if revsOf(steps) != "[9:1]" || h != 9 || m.stalled() {
			t.Fatalf("steps %s horizon %d, want [9:1] 9", revsOf(steps), h)
		}
		m.add(0, progressAt(12), t0)
		if steps, h := m.take(9); len(steps) != 0 || h != 12 {
			t.Fatalf("progress only: steps %s horizon %d, want none and 12", revsOf(steps), h)
		}
	})
	t.Run("DropsWhatIsRecorded", func(t *testing.T) {
		m := newMerger(1, 0)
		m.add(0, eventsAt(3, 4, 5), t0)
		if steps, _ := m.take(4); revsOf(steps) != "[5:1]" {
			t.Fatalf("steps %s, want only revision 5", revsOf(steps))
		}
	})
	t.Run("StepIsSeenWhenItsFirstEventArrives", func(t *testing.T) {
		// One revision's events on two watches (a transaction across
		// prefixes): the step is released with the later watch, but was
		// seen with the earlier.
		m := newMerger(2, 4)
		m.add(1, eventsAt(5), t0.Add(time.Second))
		m.add(0, eventsAt(5, 6), t0.Add(2*time.Second))
		m.add(1, progressAt(6), t0.Add(3*time.Second))
		steps, _ := m.take(4)
		if revsOf(steps) != "[5:2 6:1]" || !steps[0].at.Equal(t0.Add(time.Second)) || !steps[1].at.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("steps %s at %v, want [5:2 6:1] seen 1s and 2s after t0", revsOf(steps), []time.Time{steps[0].at, steps[1].at})
		}
	})
}
