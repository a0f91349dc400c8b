package postgres

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

var pg = pgtest.Shared{Options: pgtest.Options{NoFsync: true}}

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// open opens a store on a fresh database of the shared server, closed at the
// test's end.
func open(t *testing.T) (*Store, string) {
	t.Helper()
	url := pg.Get(t).Database(t)
	return openURL(t, url), url
}

func openURL(t *testing.T, url string) *Store {
	t.Helper()
	return openWith(t, url, Options{})
}

func openWith(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openRows is openWith of a store that writes renewals as rows, as the
// previous release did (Store.renewalRows).
func openRows(t *testing.T, url string, opts Options) *Store {
	t.Helper()
	s := openWith(t, url, opts)
	s.renewalRows = true
	return s
}

func TestContract(t *testing.T) { runContract(t, Options{}) }

// TestContractOverManyPartitions runs the contract with partitions of
// renewals sixteen ids wide, so that a batch of a few dozen events makes
// several and most reads of events span several.
func TestContractOverManyPartitions(t *testing.T) { runContract(t, Options{RenewalSpan: 16}) }

func runContract(t *testing.T, opts Options) {
	var urls sync.Map // storetest.Store → its database's URL
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) storetest.Store {
			url := pg.Get(t).Database(t)
			s := openWith(t, url, opts)
			urls.Store(s, url)
			return s
		},
		Reopen: func(t *testing.T, s storetest.Store) storetest.Store {
			url, _ := urls.Load(s)
			s.Close()
			r := openWith(t, url.(string), opts)
			urls.Store(r, url)
			return r
		},
		Second: func(t *testing.T, s storetest.Store) storetest.Store {
			url, _ := urls.Load(s)
			return openWith(t, url.(string), opts)
		},
		Log:      true,
		Rebucket: rebucketAll,
	})
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func held(source, name, holder string, token int64, sec int) audit.TrackState {
	tn := audit.Tenure{Lock: audit.LockKey{Source: source, Name: name}, Seq: 1, Holder: holder, Token: audit.Int64(token),
		GrantedAt: at(sec), LastRenewedAt: at(sec), LeaseDuration: 10 * time.Second, ExpiresAt: at(sec + 10)}
	return audit.TrackState{
		Lock: audit.Lock{Source: source, Kind: audit.KindEtcd, Name: name, Class: audit.ClassLock, State: audit.StateHeld,
			Holder: holder, Token: audit.Int64(token), AcquiredAt: at(sec), RenewedAt: at(sec),
			ExpiresAt: at(sec + 10), LeaseDuration: 10 * time.Second, ChangedAt: at(sec)},
		Recent:  []audit.Tenure{tn},
		NextSeq: 1,
	}
}

// grant is a batch that grants a lock, with its event, finding and cursor.
func grant(source, name string, token int64, sec int) audit.Batch {
	st := held(source, name, "worker-1", token, sec)
	key := st.Lock.Key()
	return audit.Batch{
		Locks:   []audit.TrackState{st},
		Tenures: st.Recent,
		Events: []audit.Event{{Lock: key, Kind: audit.EventGrant, At: at(sec), Holder: "worker-1",
			Token: audit.Int64(token), TTL: 10 * time.Second, Position: "r1", Detail: map[string]any{"why": "test"}}},
		Cursors: []audit.Cursor{{Source: source, Position: "rev-" + name, At: at(sec)}},
	}
}
