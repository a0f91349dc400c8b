package etcd

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Helpers that build watch events the way etcd sends them: a PUT carries the
// whole key-value, a DELETE only the key and the deletion revision (plus the
// previous key-value, which the collector asks for).

type kvSpec struct {
	key       string
	createRev int64
	version   int64
	lease     int64
	value     string
}

func kv(key string, createRev, lease int64) kvSpec {
	return kvSpec{key: key, createRev: createRev, version: 1, lease: lease}
}

func (k kvSpec) pb(modRev int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(k.key), CreateRevision: k.createRev, ModRevision: modRev, Version: k.version, Lease: k.lease, Value: []byte(k.value)}
}

func putEv(k kvSpec, modRev int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: k.pb(modRev)}
}

func delEv(k kvSpec, modRev int64) *mvccpb.Event {
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(k.key), ModRevision: modRev}, PrevKv: k.pb(k.createRev)}
}

// render prints changes compactly: "grant /l/a 5 1 | end /l/a 5 1".
func render(chs []change) string {
	var parts []string
	for _, c := range chs {
		kind := "grant"
		if c.kind == changeEnd {
			kind = "end"
		}
		parts = append(parts, fmt.Sprintf("%s %s %d %s", kind, c.h.lock, c.h.createRev, c.h.holder))
	}
	return strings.Join(parts, " | ")
}

func TestLocksApply(t *testing.T) {
	a1 := kv("/l/a/1", 5, 0x1)
	a2 := kv("/l/a/2", 6, 0x2)
	a3 := kv("/l/a/3", 7, 0x3)
	// steps are the revisions in order; want[i] is what step i changes.
	type stepSpec struct {
		events []*mvccpb.Event
		want   string
	}
	tests := []struct {
		name  string
		steps []stepSpec
	}{
		{"UncontendedLockUnlock", []stepSpec{
			{[]*mvccpb.Event{putEv(a1, 5)}, "grant /l/a 5 1"},
			{[]*mvccpb.Event{delEv(a1, 6)}, "end /l/a 5 1"},
		}},
		{"ThreeWaitersGrantedInOrder", []stepSpec{
			{[]*mvccpb.Event{putEv(a1, 5)}, "grant /l/a 5 1"},
			{[]*mvccpb.Event{putEv(a2, 6)}, ""},
			{[]*mvccpb.Event{putEv(a3, 7)}, ""},
			{[]*mvccpb.Event{delEv(a1, 8)}, "end /l/a 5 1 | grant /l/a 6 2"},
			{[]*mvccpb.Event{delEv(a2, 9)}, "end /l/a 6 2 | grant /l/a 7 3"},
			{[]*mvccpb.Event{delEv(a3, 10)}, "end /l/a 7 3"},
		}},
		{"WaiterLeavesBeforeItsTurn", []stepSpec{
			{[]*mvccpb.Event{putEv(a1, 5)}, "grant /l/a 5 1"},
			{[]*mvccpb.Event{putEv(a2, 6)}, ""},
			{[]*mvccpb.Event{putEv(a3, 7)}, ""},
			{[]*mvccpb.Event{delEv(a2, 8)}, ""},
			{[]*mvccpb.Event{delEv(a1, 9)}, "end /l/a 5 1 | grant /l/a 7 3"},
		}},
		{"TryLockContentionIsNoGrant", []stepSpec{
			// TryLock puts its key, sees it is not the lowest, deletes it.
			{[]*mvccpb.Event{putEv(a1, 5)}, "grant /l/a 5 1"},
			{[]*mvccpb.Event{putEv(a2, 6)}, ""},
			{[]*mvccpb.Event{delEv(a2, 7)}, ""},
		}},
		{"ProclaimIsNeitherGrantNorRenewal", []stepSpec{
			{[]*mvccpb.Event{putEv(kvSpec{key: "/l/e/1", createRev: 5, version: 1, lease: 1, value: "node-a"}, 5)}, "grant /l/e 5 1 node-a"},
			{[]*mvccpb.Event{putEv(kvSpec{key: "/l/e/1", createRev: 5, version: 2, lease: 1, value: "node-a:v2"}, 6)}, ""},
			// The tenure keeps the holder it was granted under.
			{[]*mvccpb.Event{delEv(kvSpec{key: "/l/e/1", createRev: 5, version: 2, lease: 1, value: "node-a:v2"}, 7)}, "end /l/e 5 1 node-a"},
		}},
		{"WaiterValueTakenAtItsGrant", []stepSpec{
			{[]*mvccpb.Event{putEv(kvSpec{key: "/l/e/1", createRev: 5, version: 1, lease: 1, value: "a"}, 5)}, "grant /l/e 5 1 a"},
			{[]*mvccpb.Event{putEv(kvSpec{key: "/l/e/2", createRev: 6, version: 1, lease: 2, value: "b"}, 6)}, ""},
			{[]*mvccpb.Event{putEv(kvSpec{key: "/l/e/2", createRev: 6, version: 2, lease: 2, value: "b2"}, 7)}, ""},
			{[]*mvccpb.Event{delEv(kvSpec{key: "/l/e/1", createRev: 5, version: 1, lease: 1, value: "a"}, 8)}, "end /l/e 5 1 a | grant /l/e 6 2 b2"},
		}},
		{"OneSessionTwoMutexesEndTogether", []stepSpec{
			{[]*mvccpb.Event{putEv(kv("/l/a/9", 5, 9), 5)}, "grant /l/a 5 9"},
			{[]*mvccpb.Event{putEv(kv("/l/b/9", 6, 9), 6)}, "grant /l/b 6 9"},
			{[]*mvccpb.Event{putEv(kv("/l/b/4", 7, 4), 7)}, ""},
			// A revoke deletes every key of the lease at one revision.
			{[]*mvccpb.Event{delEv(kv("/l/a/9", 5, 9), 8), delEv(kv("/l/b/9", 6, 9), 8)}, "end /l/a 5 9 | end /l/b 6 9 | grant /l/b 7 4"},
		}},
		{"NestedLockBlocksItsParent", []stepSpec{
			{[]*mvccpb.Event{putEv(kv("/l/a/b/2", 5, 2), 5)}, "grant /l/a/b 5 2"},
			// Mutex /l/a sees /l/a/b/2 as the lowest key under /l/a/: blocked.
			{[]*mvccpb.Event{putEv(kv("/l/a/1", 6, 1), 6)}, ""},
			{[]*mvccpb.Event{delEv(kv("/l/a/b/2", 5, 2), 7)}, "end /l/a/b 5 2 | grant /l/a 6 1"},
		}},
		{"NestedKeyAfterParentDoesNotBlockIt", []stepSpec{
			{[]*mvccpb.Event{putEv(kv("/l/a/1", 5, 1), 5)}, "grant /l/a 5 1"},
			// /l/a/b's range does not include /l/a/1, so it is free to take.
			{[]*mvccpb.Event{putEv(kv("/l/a/b/2", 6, 2), 6)}, "grant /l/a/b 6 2"},
			{[]*mvccpb.Event{putEv(kv("/l/a/3", 7, 3), 7)}, ""},
			// /l/a's lowest key is now the nested one: /l/a/3 keeps waiting.
			{[]*mvccpb.Event{delEv(kv("/l/a/1", 5, 1), 8)}, "end /l/a 5 1"},
			{[]*mvccpb.Event{delEv(kv("/l/a/b/2", 6, 2), 9)}, "end /l/a/b 6 2 | grant /l/a 7 3"},
		}},
		{"NonContenderKeyBlocks", []stepSpec{
			{[]*mvccpb.Event{putEv(kv("/l/a/config", 5, 0), 5)}, ""},
			{[]*mvccpb.Event{putEv(kv("/l/a/1", 6, 1), 6)}, ""},
			{[]*mvccpb.Event{delEv(kv("/l/a/config", 5, 0), 7)}, "grant /l/a 6 1"},
		}},
		{"TxnReplacingOwnerInOneRevision", []stepSpec{
			{[]*mvccpb.Event{putEv(a1, 5)}, "grant /l/a 5 1"},
			{[]*mvccpb.Event{delEv(a1, 6), putEv(kv("/l/a/2", 6, 2), 6)}, "end /l/a 5 1 | grant /l/a 6 2"},
		}},
		{"UnknownDeleteAndOutsideKeysIgnored", []stepSpec{
			{[]*mvccpb.Event{delEv(a1, 5)}, ""},
			{[]*mvccpb.Event{putEv(kv("/other/a/1", 6, 1), 6)}, ""},
			{[]*mvccpb.Event{putEv(kv("/l/a/ABC", 7, 1), 7)}, ""}, // not lowercase hex: blocks, never holds
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newLocks([]string{"/l/"})
			for i, st := range tt.steps {
				if got := render(s.apply(st.events)); got != st.want {
					t.Fatalf("step %d: changes = %q, want %q", i, got, st.want)
				}
			}
		})
	}
}

func TestLockName(t *testing.T) {
	tests := []struct {
		key, prefix string
		want        string
		ok          bool
	}{
		{"/locks/orders/694d7f3a1b2c0f05", "/locks/", "/locks/orders", true},
		{"/locks/a/b/1f", "/locks/", "/locks/a/b", true},
		{"/locks/1f", "/locks/", "/locks", true}, // NewMutex(s, "/locks"): its range is the whole prefix
		{"/locks/a/1F", "/locks/", "", false},    // clients write lowercase hex
		{"/locks/a/", "/locks/", "", false},
		{"/locks/a/xyz", "/locks/", "", false},
		{"/locks/a/12345678901234567", "/locks/", "", false}, // longer than an int64
		{"/locks/ab", "/locks/a", "", false},                 // lock "/locks" reaches outside the prefix
		{"/locks/ab/1", "/locks/a", "/locks/ab", true},
		{"1f", "", "", false},
	}
	for _, tt := range tests {
		got, ok := lockName(tt.key, tt.prefix)
		if got != tt.want || ok != tt.ok {
			t.Errorf("lockName(%q, %q) = %q, %v; want %q, %v", tt.key, tt.prefix, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLocksReload(t *testing.T) {
	s := newLocks([]string{"/l/", "/e/"})
	kvs := []*mvccpb.KeyValue{
		kv("/l/a/1", 5, 1).pb(5),
		kv("/l/a/2", 6, 2).pb(6),
		kvSpec{key: "/e/x/3", createRev: 7, version: 1, lease: 3, value: "node-a"}.pb(7),
		kv("/l/b/c/4", 3, 4).pb(3),
		kv("/l/b/5", 8, 5).pb(8), // blocked by the nested /l/b/c/4
	}
	held := s.reload(kvs)
	var got []string
	for _, h := range held {
		got = append(got, fmt.Sprintf("%s %d %s", h.lock, h.createRev, h.holder))
	}
	want := "[/e/x 7 3 node-a /l/a 5 1 /l/b/c 3 4]"
	if fmt.Sprint(got) != want {
		t.Fatalf("held = %v, want %v", got, want)
	}

	// A leader's proclaimed value at the new read does not change the holder
	// of the tenure the collector already reported.
	kvs[2] = kvSpec{key: "/e/x/3", createRev: 7, version: 2, lease: 3, value: "node-a:v2"}.pb(9)
	held = s.reload(kvs)
	if held[0].holder != "3 node-a" {
		t.Fatalf("holder after reload = %q, want the one granted, %q", held[0].holder, "3 node-a")
	}
	if got := fmt.Sprint(s.ownerLeases()); got != "[1 3 4]" {
		t.Fatalf("ownerLeases = %s, want [1 3 4]", got)
	}
	// Waiters carry on from the reloaded picture.
	if got := render(s.apply([]*mvccpb.Event{delEv(kv("/l/a/1", 5, 1), 10)})); got != "end /l/a 5 1 | grant /l/a 6 2" {
		t.Fatalf("after reload: %q", got)
	}
}

func TestOutermost(t *testing.T) {
	got := outermost([]string{"/locks/a/", "/election/", "/locks/", "/election/"})
	if fmt.Sprint(got) != "[/election/ /locks/]" {
		t.Fatalf("outermost = %v, want [/election/ /locks/]", got)
	}
}

// leaseKeys counts the keys each lease holds, which tells an Unlock (the
// lease keeps other keys) from a revoke (which deletes all of them at once).
func TestLocksLeaseKeys(t *testing.T) {
	s := newLocks([]string{"/l/"})
	s.reload([]*mvccpb.KeyValue{kv("/l/a/7", 5, 7).pb(5), kv("/l/b/7", 6, 7).pb(6), kv("/l/b/8", 7, 8).pb(7)})
	count := func() string { return fmt.Sprintf("7:%d 8:%d 9:%d", s.leaseKeys(7), s.leaseKeys(8), s.leaseKeys(9)) }
	if got := count(); got != "7:2 8:1 9:0" {
		t.Fatalf("after reload: %s, want 7:2 8:1 9:0", got)
	}
	s.apply([]*mvccpb.Event{delEv(kv("/l/a/7", 5, 7), 8)})
	if got := count(); got != "7:1 8:1 9:0" {
		t.Fatalf("after an unlock: %s, want 7:1 8:1 9:0", got)
	}
	// A value rewritten under another lease moves the key to it.
	s.apply([]*mvccpb.Event{putEv(kvSpec{key: "/l/b/8", createRev: 7, version: 2, lease: 9}, 9)})
	if got := count(); got != "7:1 8:0 9:1" {
		t.Fatalf("after a rewrite under lease 9: %s, want 7:1 8:0 9:1", got)
	}
	s.apply([]*mvccpb.Event{delEv(kv("/l/b/7", 6, 7), 10), delEv(kv("/l/b/8", 7, 9), 10)})
	if got := count(); got != "7:0 8:0 9:0" {
		t.Fatalf("after the last deletes: %s, want none", got)
	}
}
