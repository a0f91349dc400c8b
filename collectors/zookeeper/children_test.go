package zookeeper

import (
	"maps"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

func TestParseSeq(t *testing.T) {
	for _, tt := range []struct {
		name string
		seq  int64
		ok   bool
	}{
		{"_c_fc173c2bd893c764482ffd128041517b-lock-0000000000", 0, true},       // go-zookeeper zk.Lock
		{"_c_f290140d-9856-42ad-b9bf-348ffc086062-lock-0000000759", 759, true}, // Curator InterProcessMutex
		{"_c_7d1e0c5a-2222-4b3c-8d4e-5f6a7b8c9d0e-latch-0000000012", 12, true}, // Curator LeaderLatch
		{"guid-n_0000000003", 3, true},                                         // documented election
		{"39e52136344e4339bd4273b186ac1456__lock__0000000007", 7, true},        // kazoo Lock, WriteLock, Election
		{"3fb11018c6364bb296dffbd7a89c8da3__rlock__0000000008", 8, true},       // kazoo ReadLock
		{"x-lock-lock-0000000042", 42, true},                                   // the last marker counts
		{"guid-lock--2147483648", -2147483648, true},                           // the counter wrapped
		{"guid-lock-42", 0, false},                                             // not ZooKeeper's %010d
		{"orders", 0, false},                                                   // a lock directory
		{"_c_4ab3-__READ__0000000001", 0, false},                               // a read-write lock: not lowest-sequence
		{"lock-00000000x1", 0, false},
	} {
		seq, ok := parseSeq(tt.name)
		if seq != tt.seq || ok != tt.ok {
			t.Errorf("parseSeq(%q) = %d, %v; want %d, %v", tt.name, seq, ok, tt.seq, tt.ok)
		}
	}
}

func TestCreatesOf(t *testing.T) {
	// Two lock nodes and a plain child created and deleted, one child now
	// (backends.md, F.4): cversion 7, one child, four creates.
	if got := createsOf(7, 1); got != 4 {
		t.Errorf("createsOf(7, 1) = %d, want 4", got)
	}
}

func dirOf(pzxid, creates int64, nodes ...node) *dir {
	sortNodes(nodes)
	return &dir{path: "/locks/m", nodes: nodes, pzxid: pzxid, creates: creates}
}

func TestDiff(t *testing.T) {
	a := node{name: "a-lock-0000000001", seq: 1, czxid: 10, owner: 100}
	b := node{name: "b-lock-0000000002", seq: 2, czxid: 11, owner: 200}
	c := node{name: "c-lock-0000000004", seq: 4, czxid: 14, owner: 300}
	for _, tt := range []struct {
		name           string
		before, after  *dir
		changed        bool
		ended, granted *node
		unseen         int64
	}{
		{"FirstGrant", dirOf(5, 0), dirOf(10, 1, a), true, nil, &a, 0},
		{"WaiterJoins", dirOf(10, 1, a), dirOf(11, 2, a, b), false, nil, nil, 0},
		{"Handover", dirOf(11, 2, a, b), dirOf(12, 2, b), true, &a, &b, 0},
		{"ReleaseLeavesItFree", dirOf(12, 1, a), dirOf(13, 1), true, &a, nil, 0},
		// A contender came and went between the reads: one create unseen.
		{"ShortLivedBetweenReads", dirOf(11, 2, a, b), dirOf(15, 4, b, c), true, &a, &b, 1},
		{"DirectoryGone", dirOf(12, 1, a), nil, true, &a, nil, 0},
		{"NeverHeld", nil, dirOf(3, 0), false, nil, nil, 0},
		// A directory read for the first time: its creates before the read
		// are unseen contenders too.
		{"FreshDirectoryAfterAShortTenure", nil, dirOf(15, 2, b), true, nil, &b, 1},
		{"FreeDirectoryCarriesItsUnseen", freeAfterUnseen(13, 1, 1), dirOf(14, 2, b), true, nil, &b, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, changed := diff(tt.before, tt.after)
			if changed != tt.changed {
				t.Fatalf("changed = %v, want %v", changed, tt.changed)
			}
			if !changed {
				return
			}
			if !sameNode(h.ended, tt.ended) || !sameNode(h.granted, tt.granted) || h.unseen != tt.unseen || h.lock != "/locks/m" {
				t.Errorf("handover = %+v, want ended %v granted %v unseen %d", h, tt.ended, tt.granted, tt.unseen)
			}
		})
	}
}

// freeAfterUnseen is a free directory whose reads missed unseen contenders.
func freeAfterUnseen(pzxid, creates, unseen int64) *dir {
	d := dirOf(pzxid, creates)
	d.unseen = unseen
	return d
}

func sameNode(a, b *node) bool {
	return a == nil && b == nil || a != nil && b != nil && a.czxid == b.czxid
}

func TestHolder(t *testing.T) {
	n := node{owner: 0x100002ae6440002, data: "10.0.0.7"}
	if got := n.holder(); got != "0x100002ae6440002 10.0.0.7" {
		t.Errorf("holder = %q", got)
	}
	n.data = ""
	if got := n.holder(); got != "0x100002ae6440002" {
		t.Errorf("holder without data = %q", got)
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		name     string
		e        evidence
		kind     audit.EventKind
		inferred bool
	}{
		{"SessionOwnsOtherNodes", evidence{ownsOther: true}, audit.EventRelease, false},
		{"NoProbes", evidence{}, audit.EventRelease, true},
		{"StillConnected", evidence{probing: true, connected: true, complete: true}, audit.EventRelease, false},
		{"ServerSilent", evidence{probing: true, complete: false, probedBefore: true}, audit.EventRelease, true},
		{"DisconnectedThenGone", evidence{probing: true, complete: true, probedBefore: true}, audit.EventExpire, true},
		{"ConnectedThenGone", evidence{probing: true, complete: true, probedBefore: true, connectedBefore: true}, audit.EventRelease, true},
		{"ConnectedButSilentThenGone", evidence{probing: true, complete: true, probedBefore: true, connectedBefore: true, silent: true}, audit.EventExpire, true},
		{"GoneNeverProbed", evidence{probing: true, complete: true}, audit.EventRelease, true},
	} {
		v := classify(tt.e)
		if v.kind != tt.kind || v.inferred != tt.inferred || v.reason == "" {
			t.Errorf("%s: classify = %+v, want %s inferred=%v with a reason", tt.name, v, tt.kind, tt.inferred)
		}
	}
}

func TestParseCons(t *testing.T) {
	answer := " /127.0.0.1:40122[0](queued=0,recved=1,sent=0)\n" +
		" /127.0.0.1:40100[1](queued=0,recved=12,sent=12,sid=0x100002ae6440002,lop=PING,est=1700000000000,to=4000,lcxid=0x3,lzxid=0x25,lresp=1234,llat=0,minlat=0,avglat=0,maxlat=1)\n" +
		" /[0:0:0:0:0:0:0:1]:40101[1](queued=0,recved=2,sent=2,sid=0x100002ae6440003,lop=GETC,est=1700000000001,to=1000,lcxid=0x1,lzxid=0x26,lresp=1,llat=0,minlat=0,avglat=0,maxlat=0)\n\n"
	got, err := parseCons(answer)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]consSession{0x100002ae6440002: {timeout: 4 * time.Second, lresp: 1234}, 0x100002ae6440003: {timeout: time.Second, lresp: 1}}
	if !maps.Equal(got, want) {
		t.Errorf("parseCons = %v, want %v", got, want)
	}
	if _, err := parseCons("cons is not executed because it is not in the whitelist.\n"); err == nil {
		t.Error("a refused cons parsed")
	}
}

func TestServerClockNeverOverstatesIdle(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	var k serverClock
	k.sample(t0, 500)                   // newest answer 0..? before: offset <= 999500
	k.sample(t0.Add(time.Second), 1490) // an answer 10 ms before this probe
	if got := k.idle(t0.Add(time.Second), 990); got != 510*time.Millisecond {
		t.Errorf("idle = %v, want 510ms (the answer 500 ms before the newest, which was 10 ms old)", got)
	}
	k.sample(t0.Add(2*time.Second), 100) // the server restarted: a new clock
	if got := k.idle(t0.Add(2*time.Second), 100); got != 0 {
		t.Errorf("idle after a restart = %v, want 0", got)
	}
}

// kazoo's readers at the head of a directory hold it together; a writer
// holds alone, and so does a reader behind one.
func TestSharing(t *testing.T) {
	r1 := node{name: "3fb11018c6364bb296dffbd7a89c8da3__rlock__0000000000", seq: 0, reader: true}
	r2 := node{name: "58d2f40e4567402b96aba70b9c2adc68__rlock__0000000001", seq: 1, reader: true}
	w := node{name: "081d7574f80b4c90911792204c1eadfc__lock__0000000002", seq: 2}
	r3 := node{name: "7092e27c20f54e598c9a75230dae6ed1__rlock__0000000003", seq: 3, reader: true}
	for _, tt := range []struct {
		name  string
		d     *dir
		holds int
	}{
		{"Free", dirOf(1, 0), 0},
		{"TwoReadersThenAWriter", dirOf(5, 4, r1, r2, w, r3), 2},
		{"WriterFirst", dirOf(5, 2, w, r3), 1},
	} {
		if got := tt.d.sharing(); got != tt.holds {
			t.Errorf("%s: sharing = %d, want %d", tt.name, got, tt.holds)
		}
	}
	for _, n := range []node{r1, r2, w, r3} {
		if isReader(n.name) != n.reader {
			t.Errorf("isReader(%s) = %t, want %t", n.name, !n.reader, n.reader)
		}
	}
}
