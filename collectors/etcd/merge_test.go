package etcd

import (
	"fmt"
	"testing"

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
	t.Run("OneWatchReleasesAtOnce", func(t *testing.T) {
		m := newMerger(1, 4)
		m.add(0, eventsAt(5, 5, 7))
		steps, h := m.take(4)
		if revsOf(steps) != "[5:2 7:1]" || h != 7 || m.stalled() {
			t.Fatalf("steps %s horizon %d stalled %v, want [5:2 7:1] 7 false", revsOf(steps), h, m.stalled())
		}
	})
	t.Run("WaitsForTheQuietWatch", func(t *testing.T) {
		m := newMerger(2, 4)
		m.add(0, eventsAt(6, 9))
		if steps, h := m.take(4); len(steps) != 0 || h != 4 || !m.stalled() {
			t.Fatalf("before watch 1 reports: steps %s horizon %d stalled %v, want none, 4, stalled", revsOf(steps), h, m.stalled())
		}
		m.add(1, eventsAt(8))
		steps, h := m.take(4)
		if revsOf(steps) != "[6:1 8:1]" || h != 8 || !m.stalled() {
			t.Fatalf("steps %s horizon %d, want [6:1 8:1] 8 with 9 still held", revsOf(steps), h)
		}
		m.add(1, progressAt(12))
		steps, h = m.take(8)
		if revsOf(steps) != "[9:1]" || h != 9 || m.stalled() {
			t.Fatalf("steps %s horizon %d, want [9:1] 9", revsOf(steps), h)
		}
		m.add(0, progressAt(12))
		if steps, h := m.take(9); len(steps) != 0 || h != 12 {
			t.Fatalf("progress only: steps %s horizon %d, want none and 12", revsOf(steps), h)
		}
	})
	t.Run("DropsWhatIsRecorded", func(t *testing.T) {
		m := newMerger(1, 0)
		m.add(0, eventsAt(3, 4, 5))
		if steps, _ := m.take(4); revsOf(steps) != "[5:1]" {
			t.Fatalf("steps %s, want only revision 5", revsOf(steps))
		}
	})
}
