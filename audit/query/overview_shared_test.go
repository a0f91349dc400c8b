package query

import (
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// heldStore is a real store whose LockCounts, the overview's first read,
// waits until released, and counts its calls.
type heldStore struct {
	*sqlite.Store
	calls   atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) LockCounts(ctx context.Context) ([]audit.LockCount, error) {
	if s.calls.Add(1) == 1 {
		close(s.entered)
		<-s.release
	}
	return s.Store.LockCounts(ctx)
}

// TestOverviewReadingIsShared: requests that ask for the overview while one
// reading is under way get that reading, and the store is read once; one
// that leaves while waiting fails alone.
func TestOverviewReadingIsShared(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := st.Apply(ctx, audit.Batch{Locks: []audit.TrackState{{Lock: audit.Lock{Source: "prod-etcd", Name: "/locks/a",
		Kind: audit.KindEtcd, Class: audit.ClassLock, State: audit.StateFree, ChangedAt: at}}}}); err != nil {
		t.Fatal(err)
	}
	held := &heldStore{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
	r := New(Config{Store: audit.Settled(held)})

	const n = 3
	got := make([]Overview, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ask := func(i int, ctx context.Context, now time.Time) {
		defer wg.Done()
		got[i], errs[i] = r.Overview(ctx, now)
	}
	wg.Add(1)
	go ask(0, ctx, at)
	<-held.entered
	for i := 1; i < n; i++ {
		wg.Add(1)
		go ask(i, ctx, at.Add(time.Duration(i)*time.Second))
	}
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := r.Overview(leaving, at)
		left <- err
	}()
	waitFor(t, func() bool { return r.overviewWaiting.Load() == n+1 })
	leave()
	if err := <-left; err != context.Canceled {
		t.Fatalf("the request that left: %v, want context.Canceled", err)
	}
	close(held.release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(got[i], got[0]) {
			t.Errorf("request %d got an overview of its own:\n%+v\nwant the shared one:\n%+v", i, got[i], got[0])
		}
	}
	if c := held.calls.Load(); c != 1 {
		t.Errorf("the store's lock counts were read %d times, want once", c)
	}
	if got[0].Counts.Locks != 1 || !got[0].Now.Equal(at) {
		t.Errorf("overview: %d locks at %v, want 1 at %v (the first request's reading)", got[0].Counts.Locks, got[0].Now, at)
	}
	// With nobody reading, the next request reads anew.
	if _, err := r.Overview(ctx, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if c := held.calls.Load(); c != 2 {
		t.Errorf("after the shared reading: %d reads, want 2", c)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
