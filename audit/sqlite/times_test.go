package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// A database written before 0011 stored 0 for "no time"; after the upgrade
// those read as none still, while times that always exist (an event's)
// read as the epoch they were.
func TestMigrationKeepsNoneApartFromTheEpoch(t *testing.T) {
	ctx := context.Background()
	epoch := time.Unix(0, 0).UTC()
	s := upgradedFrom(t, 9, []string{
		`INSERT INTO locks (id, source, name, state) VALUES (1, 'etcd', '/locks/free', 'free')`,
		`INSERT INTO locks (id, source, name, state, acquired_at, renewed_at, expires_at, lease_duration_ms, changed_at)
			VALUES (2, 'etcd', '/locks/held', 'held', 5000, 5000, 0, 0, 5000)`,
		`INSERT INTO tenures (lock_id, seq, holder, granted_at, last_renewed_at, expires_at, ended_at) VALUES (2, 1, 'h', 5000, 0, 0, 0)`,
		`INSERT INTO events (lock_id, kind, at) VALUES (1, 'write_accepted', 0)`,
		`INSERT INTO cursors (source, position) VALUES ('etcd', '42')`,
	})
	free := storetest.LockByKey(t, s, audit.LockKey{Source: "etcd", Name: "/locks/free"})
	if !free.AcquiredAt.IsZero() || !free.RenewedAt.IsZero() || !free.ExpiresAt.IsZero() || !free.ChangedAt.IsZero() {
		t.Errorf("free lock = %s, want no times", storetest.Show(free))
	}
	held := storetest.LockByKey(t, s, audit.LockKey{Source: "etcd", Name: "/locks/held"})
	if !held.AcquiredAt.Equal(time.Unix(0, 5000)) || !held.ExpiresAt.IsZero() {
		t.Errorf("held lock = %s, want acquired at 5 µs and no expiry", storetest.Show(held))
	}
	tenures, err := s.Tenures(ctx, held.ID, audit.TimeFilter{From: epoch})
	if err != nil {
		t.Fatal(err)
	}
	if len(tenures) != 1 || !tenures[0].EndedAt.IsZero() || !tenures[0].LastRenewedAt.IsZero() || !tenures[0].ExpiresAt.IsZero() {
		t.Errorf("tenures = %s, want one still held with no renewal or expiry", storetest.Show(tenures))
	}
	events, err := s.Events(ctx, free.ID, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || !events[0].At.Equal(epoch) || events[0].At.IsZero() {
		t.Errorf("events = %s, want one at the epoch", storetest.Show(events))
	}
	cursors, err := s.Cursors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cursors) != 1 || !cursors[0].At.IsZero() {
		t.Errorf("cursors = %s, want one without a time", storetest.Show(cursors))
	}
}
