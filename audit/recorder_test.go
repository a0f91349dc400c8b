package audit_test

import (
	"context"
	"path/filepath"
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
	if err := rec.Observe(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	now.Store(at(11 * time.Second).UnixNano())
	// The collector vouches that it has seen everything up to 11 s.
	if err := rec.Observe(context.Background(), audit.Input{Source: "src", Kind: audit.KindEtcd, At: at(11 * time.Second), Live: true}); err != nil {
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
