package runcodec

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// batch is one commit's renewals of n node leases of one bucket: lock ids
// bucket, bucket+LogBuckets, ..., each renewed once (twice for every
// tenth), in the order the tracker made them.
func batch(rng *rand.Rand, n int) []Logged {
	t := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC).UnixNano()
	var out []Logged
	for i := range n {
		lock := int64(3 + i*LogBuckets)
		renewed := t + rng.Int64N(int64(400*time.Millisecond))/1e3*1e3
		l := Logged{LockID: lock, Seq: int64(1 + i%3),
			Renewal: Renewal{At: renewed + rng.Int64N(int64(4*time.Millisecond)), RenewedAt: renewed, Margin: 750, TTL: 40 * time.Second}}
		out = append(out, l)
		if i%10 == 0 {
			l.At += int64(time.Millisecond)
			l.RenewedAt += int64(time.Millisecond)
			l.Margin = NoMargin
			l.TTL += time.Millisecond // a lease that changes: the run's ttl column
			out = append(out, l)
		}
	}
	// A lock's renewal of another detail and form: a group of its own.
	out = append(out, Logged{LockID: 3, Seq: 1, Detail: `{"key":"k"}`,
		Renewal: Renewal{At: t + int64(time.Second), RenewedAt: audit.NoNanos, Margin: NoMargin, Position: "0x1f", TTL: 15 * time.Second}})
	return out
}

// decodeAll is every renewal of a log row's data, keyed by its index.
func decodeAll(t *testing.T, data []byte) map[int]Logged {
	t.Helper()
	groups, err := LogGroups(data, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[int]Logged)
	for _, g := range groups {
		rs, err := g.Decode()
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			out[g.Index+i] = Logged{LockID: g.LockID, Seq: g.Seq, Detail: g.Detail, Renewal: r}
		}
	}
	return out
}

func TestLogRoundTrip(t *testing.T) {
	logged := batch(rand.New(rand.NewPCG(1, 2)), 500)
	row, err := EncodeLog(logged)
	if err != nil {
		t.Fatal(err)
	}
	if row.Renewals != len(logged) {
		t.Fatalf("row holds %d renewals, want %d", row.Renewals, len(logged))
	}
	got := decodeAll(t, row.Data)
	if len(got) != len(logged) {
		t.Fatalf("decoded %d renewals, want %d", len(got), len(logged))
	}
	// Every renewal once, each lock's in the order stored, every field
	// kept exactly.
	seen := make(map[int64][]Logged)
	for i := range len(got) {
		l := got[i]
		seen[l.LockID] = append(seen[l.LockID], l)
	}
	want := make(map[int64][]Logged)
	for _, l := range logged {
		want[l.LockID] = append(want[l.LockID], l)
		if l.At < row.FirstAt || l.At > row.LastAt {
			t.Fatalf("renewal at %d outside the row's %d..%d", l.At, row.FirstAt, row.LastAt)
		}
	}
	if !reflect.DeepEqual(seen, want) {
		t.Fatal("decoded renewals differ from those logged")
	}
	t.Logf("%d renewals, %.1f bytes each", len(logged), float64(len(row.Data))/float64(len(logged)))
}

func TestLogGroupsOfOneLock(t *testing.T) {
	logged := batch(rand.New(rand.NewPCG(3, 4)), 50)
	row, err := EncodeLog(logged)
	if err != nil {
		t.Fatal(err)
	}
	all := decodeAll(t, row.Data)
	groups, err := LogGroups(row.Data, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 {
		t.Fatalf("lock 3 has %d groups, want 2 (its heartbeats and the renewal of another detail)", len(groups))
	}
	for _, g := range groups {
		events, err := g.Events(77)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range events {
			l := all[g.Index+i]
			row, index, ok := SplitLogID(e.ID)
			if !ok || row != 77 || index != g.Index+i || e.LockID != 3 || e.Seq != l.Seq || e.TTL != l.TTL ||
				e.Position != l.Position || audit.Nanos(e.At) != l.At || e.Kind != audit.EventRenew {
				t.Fatalf("event %d of group at %d = %+v, logged %+v", i, g.Index, e, l)
			}
		}
	}
	if _, _, ok := SplitLogID(ID(5, 1)); ok {
		t.Fatal("a run renewal's id split as a logged one's")
	}
	if _, _, ok := SplitLogID(12345); ok {
		t.Fatal("a row's id split as a logged one's")
	}
	if _, _, ok := Split(LogID(5, 1)); ok {
		t.Fatal("a logged renewal's id split as a run's")
	}
}

func TestEncodeLogRefuses(t *testing.T) {
	ok := Logged{LockID: 1, Seq: 1, Renewal: Renewal{At: 1e18, RenewedAt: audit.NoNanos, Margin: NoMargin, TTL: time.Second}}
	odd := ok.Renewal
	odd.TTL = 1500 * time.Microsecond
	for name, l := range map[string]Logged{
		"position":  {LockID: 1, Seq: 1, Renewal: Renewal{At: 1e18, Position: "007", TTL: time.Second}},
		"no tenure": {LockID: 1, Renewal: ok.Renewal},
		"lease":     {LockID: 1, Seq: 1, Renewal: odd},
	} {
		if _, err := EncodeLog([]Logged{ok, l}); err == nil {
			t.Errorf("%s: EncodeLog took a renewal the log cannot keep", name)
		}
	}
	if _, err := EncodeLog(nil); err == nil {
		t.Error("EncodeLog made an empty row")
	}
}

func TestLogGroupsRefusesDamage(t *testing.T) {
	row, err := EncodeLog(batch(rand.New(rand.NewPCG(5, 6)), 20))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 2, 5, len(row.Data) - 1} {
		if _, err := LogGroups(row.Data[:n], 0); err == nil && n > 1 {
			t.Errorf("LogGroups took %d of %d bytes", n, len(row.Data))
		}
	}
	bad := append([]byte{9}, row.Data[1:]...)
	if _, err := LogGroups(bad, 0); err == nil {
		t.Error("LogGroups took an unknown version")
	}
}

func FuzzLogGroups(f *testing.F) {
	row, _ := EncodeLog(batch(rand.New(rand.NewPCG(7, 8)), 10))
	f.Add(row.Data, int64(3))
	f.Fuzz(func(t *testing.T, data []byte, lock int64) {
		groups, err := LogGroups(data, lock)
		if err != nil {
			return
		}
		for _, g := range groups {
			if lock != 0 && g.LockID != lock {
				t.Fatalf("group of lock %d returned for lock %d", g.LockID, lock)
			}
			events, err := g.Events(1)
			if err != nil {
				continue
			}
			if len(events) != g.Renewals {
				t.Fatalf("group says %d renewals, decodes %d", g.Renewals, len(events))
			}
		}
	})
}

func BenchmarkEncodeLog(b *testing.B) {
	logged := batch(rand.New(rand.NewPCG(1, 1)), 500)
	for b.Loop() {
		if _, err := EncodeLog(logged); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(logged)), "ns/renewal")
}

// BenchmarkLogGroupsOfOneLock reads one lock's groups from a bucket's row
// of 500 locks: the headers a read of a lock walks past.
func BenchmarkLogGroupsOfOneLock(b *testing.B) {
	logged := batch(rand.New(rand.NewPCG(1, 1)), 500)
	row, err := EncodeLog(logged)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := LogGroups(row.Data, 3+250*LogBuckets); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*500), "ns/group")
}
