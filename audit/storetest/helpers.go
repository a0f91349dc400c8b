package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The helpers here and in recorder.go are exported for a store's own tests
// (migrations, outages) and the recorder's in package audit, so they read
// like the suite's.

// T0 is the base of every test's clock: nanoseconds included, so truncation
// would show.
var T0 = time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)

// At is sec seconds after T0.
func At(sec int) time.Time { return T0.Add(time.Duration(sec) * time.Second) }

// Apply applies b to s, failing the test on an error.
func Apply(t *testing.T, s Store, b audit.Batch) {
	t.Helper()
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// LockByKey reads one lock, failing the test if it is not there.
func LockByKey(t *testing.T, s Store, key audit.LockKey) audit.Lock {
	t.Helper()
	l, err := s.LockByKey(context.Background(), key)
	if err != nil {
		t.Fatalf("LockByKey(%s): %v", key, err)
	}
	return l
}

// Equal reports a difference between got and want, deeply compared.
func Equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, Show(got), Show(want))
	}
}

// Show renders v as JSON so pointers and times print as values.
func Show(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// heldLock is a lock of etcd held by holder since sec, with a 10 s lease.
func heldLock(source, name, holder string, token int64, sec int) audit.TrackState {
	return audit.TrackState{
		Lock: audit.Lock{
			Source: source, Kind: audit.KindEtcd, Name: name, Class: audit.ClassLock, State: audit.StateHeld,
			Holder: holder, Token: audit.Int64(token), AcquiredAt: At(sec), RenewedAt: At(sec),
			ExpiresAt: At(sec + 10), LeaseDuration: 10 * time.Second, ChangedAt: At(sec),
		},
		NextSeq: 1,
	}
}
