package storetest

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// ResourceRows returns st's resources as a batch carries them, by name.
func ResourceRows(st audit.TrackState) []audit.ResourceRow {
	var rows []audit.ResourceRow
	for _, name := range slices.Sorted(maps.Keys(st.Resources)) {
		rows = append(rows, audit.ResourceRow{Lock: st.Lock.Key(), Resource: name, State: *st.Resources[name]})
	}
	return rows
}

// A batch writes the resources it changed, each a row of its own: a later
// batch that changes one resource leaves the lock's others as they were,
// writes no lock row, and the last entry of a resource in a batch wins.
func testResourcesAreRowsOfTheirOwn(t *testing.T, h Harness) {
	s := h.Open(t)
	st := heldLock("src", "orders", "a", 7, 0)
	st.LastGrantToken = audit.Int64(7)
	st.Resources = map[string]*audit.ResourceState{
		"cache":  {},
		"db":     {Highest: audit.Int64(6), Pending: []audit.PendingGrant{{Token: 7, GrantedAt: At(0), Holder: "a"}}},
		"ledger": {Highest: audit.Int64(7)},
	}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{st}, Resources: ResourceRows(st)})

	// A write with token 7 closes db's exposure window; an earlier entry
	// of db in the same batch is replaced.
	key := st.Lock.Key()
	Apply(t, s, audit.Batch{Resources: []audit.ResourceRow{
		{Lock: key, Resource: "db", State: audit.ResourceState{Highest: audit.Int64(99)}},
		{Lock: key, Resource: "db", State: audit.ResourceState{Highest: audit.Int64(7)}},
	}})
	restored := restoreOnly(t, s)
	want := map[string]*audit.ResourceState{
		"cache":  {},
		"db":     {Highest: audit.Int64(7)},
		"ledger": {Highest: audit.Int64(7)},
	}
	Equal(t, "restored resources", restored.Resources, want)
	if got := restored.LastGrantToken; got == nil || *got != 7 {
		t.Errorf("restored last grant token = %v, want 7: the resource batch must leave the lock's state", got)
	}
}

// ResourcesInTrackState are rows as a store before lock_resources (SQLite's
// 0024, PostgreSQL's 0014) kept them: a lock's resources inside the JSON
// of its track state.
var ResourcesInTrackState = []string{
	`INSERT INTO locks (source, name) VALUES ('src', 'orders')`,
	`INSERT INTO lock_tracks (lock_id, recent_from, state) VALUES ((SELECT id FROM locks WHERE name = 'orders'), 1,
		'{"next_seq":0,"last_grant_token":3,"resources":{"cache":{},"db":{"highest":2,"pending":[{"token":3,"granted_at":"2025-03-14T09:26:53.589793238Z","holder":"b"}]}}}')`,
}

// CheckResourcesMoved checks that the resources of ResourcesInTrackState
// are restored from rows of their own after the upgrade, and the rest of
// the lock's state with them.
func CheckResourcesMoved(t *testing.T, s Store) {
	t.Helper()
	restored := restoreOnly(t, s)
	want := map[string]*audit.ResourceState{
		"cache": {},
		"db":    {Highest: audit.Int64(2), Pending: []audit.PendingGrant{{Token: 3, GrantedAt: T0, Holder: "b"}}},
	}
	Equal(t, "resources after the upgrade", restored.Resources, want)
	if got := restored.LastGrantToken; got == nil || *got != 3 {
		t.Errorf("last grant token after the upgrade = %v, want 3", got)
	}
}

// restoreOnly returns the state s restores of its one lock.
func restoreOnly(t *testing.T, s Store) audit.TrackState {
	t.Helper()
	states, _, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(states) != 1 {
		t.Fatalf("restored %d locks, want 1", len(states))
	}
	return states[0]
}
