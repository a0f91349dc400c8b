package audit_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// The recorder's cases that rest on the store (restarts, failed commits,
// request ids, syncs and the fresh overlay) are in audit/storetest, run on
// every store. Here is what the recorder decides alone, over SQLite.

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestRecorderExpiresByClock(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	var now atomic.Int64
	now.Store(at(0).UnixNano())
	rec := storetest.StartRecorder(t, st, audit.WithClock(func() time.Time { return time.Unix(0, now.Load()) }), audit.WithTickInterval(5*time.Millisecond))
	in := storetest.GrantInput("A", 1, at(0), "")
	in.ExpireByClock = true
	if err := rec.Record(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	now.Store(at(11 * time.Second).UnixNano())
	// The collector vouches that it has seen everything up to 11 s.
	if err := rec.Record(context.Background(), audit.Input{Source: "src", Kind: audit.KindEtcd, At: at(11 * time.Second), Live: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		kinds := storetest.EventKinds(t, st)
		if len(kinds) == 2 && kinds[1] == audit.EventExpire {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events = %v, want the clock to expire the lease", kinds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRecorderAfterCloseAnswersUnavailable(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	rec := storetest.StartRecorder(t, st)
	rec.Close()
	for i := 0; i < 100; i++ { // some of these reach the channel before seeing stop
		err := rec.ReportWrites(context.Background(), []audit.WriteReport{{Source: "src", Lock: "orders", Resource: "db", Outcome: audit.WriteAccepted, At: at(0)}})
		if audit.ErrorCode(err) != audit.EUNAVAILABLE {
			t.Fatalf("ReportWrites after Close = %v, want unavailable", err)
		}
	}
	if rec.Ready(context.Background()) == nil {
		t.Fatal("Ready after Close = nil, want an error")
	}
}

// Under concurrent requests the recorder commits at most once a commit
// interval, gathering what arrives meanwhile into one commit: every commit
// starts the read connections' caches over. A lone sender is not held up.
func TestRecorderPacesCommitsOfConcurrentRequests(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	ctx := context.Background()
	write := func(i int) []audit.WriteReport {
		return []audit.WriteReport{{Source: "src", Lock: "orders", Resource: fmt.Sprintf("db-%d", i), Outcome: audit.WriteAccepted, At: at(time.Duration(i) * time.Millisecond)}}
	}
	hold := make(chan struct{})
	var armed, held atomic.Bool
	commits := make(chan int, 100) // the writes of each commit that has some
	rec := storetest.StartRecorder(t, st, audit.WithCommitInterval(2*time.Second), audit.WithSubscribers(audit.CommitFunc(func(c audit.Commit) {
		if c.Writes > 0 {
			commits <- c.Writes
		}
		if armed.Load() && held.CompareAndSwap(false, true) {
			<-hold // one commit holds the recording goroutine up
		}
	})))
	release := sync.OnceFunc(func() { close(hold) })
	defer release()

	// A lone sender's writes, one after another, are each committed at
	// once, well within the interval.
	for i := range 2 {
		short, cancel := context.WithTimeout(ctx, time.Second)
		err := rec.ReportWrites(short, write(i))
		cancel()
		if err != nil {
			t.Fatalf("a lone sender's write %d: %v", i, err)
		}
	}
	// Two senders queue behind a held commit and are committed together.
	armed.Store(true)
	errs := make(chan error, 13)
	send := func(i int) { errs <- rec.ReportWrites(ctx, write(i)) }
	go send(2)
	for deadline := time.Now().Add(5 * time.Second); !held.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held commit did not happen")
		}
	}
	go send(3)
	go send(4)
	for deadline := time.Now().Add(5 * time.Second); rec.Queued() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued behind the held commit, want 2", rec.Queued())
		}
	}
	release()
	next := func() int {
		select {
		case n := <-commits:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no commit in 10s")
			return 0
		}
	}
	got := []int{next(), next(), next(), next()}
	// Ten senders, one every 50 ms, all within the interval from the two's
	// commit: one commit. Unpaced, each would have one of its own.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 5; i <= 14; i++ {
		<-tick.C
		go send(i)
	}
	got = append(got, next())
	for range 13 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if want := []int{1, 1, 1, 2, 10}; !slices.Equal(got, want) {
		t.Errorf("writes per commit = %v, want %v", got, want)
	}
}

// failingJournal is a store whose commits fail while fail is set, as a full
// disk's would.
type failingJournal struct {
	audit.Journal
	fail atomic.Bool
}

func (j *failingJournal) Apply(ctx context.Context, b audit.Batch) error {
	if j.fail.Load() {
		return fmt.Errorf("disk full")
	}
	return j.Journal.Apply(ctx, b)
}

// Subscribers are handed every successful commit, one after another in the
// order given, before the requests it covers are answered; a commit that
// failed reaches none.
func TestRecorderHandsCommitsToSubscribersInOrder(t *testing.T) {
	j := &failingJournal{Journal: openStore(t, filepath.Join(t.TempDir(), "lw.db"))}
	var mu sync.Mutex
	var got []string // a subscriber's name and the holders its commit granted to
	subscriber := func(name string) audit.CommitSubscriber {
		return audit.CommitFunc(func(c audit.Commit) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range c.Batch.Events {
				if e.Kind == audit.EventGrant {
					got = append(got, name+":"+e.Holder)
				}
			}
		})
	}
	rec := storetest.StartRecorder(t, j, audit.WithSubscribers(subscriber("metrics"), subscriber("alerts")),
		audit.WithSubscribers(subscriber("verdicts")))
	ctx := context.Background()
	if err := rec.Record(ctx, storetest.GrantInput("A", 1, at(0), "1")); err != nil {
		t.Fatal(err)
	}
	j.fail.Store(true)
	if err := rec.Record(ctx, storetest.GrantInput("B", 2, at(time.Second), "2")); err == nil {
		t.Fatal("a commit to a failing store succeeded")
	}
	j.fail.Store(false)
	if err := rec.Record(ctx, storetest.GrantInput("C", 3, at(2*time.Second), "3")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"metrics:A", "alerts:A", "verdicts:A", "metrics:C", "alerts:C", "verdicts:C"}
	if !slices.Equal(got, want) {
		t.Fatalf("subscribers saw %v, want %v", got, want)
	}
}
