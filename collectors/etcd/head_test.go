package etcd

import (
	"testing"
	"time"
)

func TestHeadTimes(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var h headTimes
	if got := h.since(10, at(500)); !got.Equal(at(500)) {
		t.Fatalf("no samples: since = %v, want the receipt", got)
	}
	h.add(10, at(100))
	h.add(20, at(200))
	h.add(15, at(300)) // a read answered late: rev 20 was reached earlier
	h.add(30, at(150)) // answered before a lower one: rev 20's sample tells nothing more
	h.add(40, at(400))
	for _, tt := range []struct {
		rev, received int
		want          int
	}{
		{5, 900, 100},  // revision 10 was reached by 100ms, so 5 was too
		{10, 900, 100}, // the earliest sample at or past the revision
		{11, 900, 150}, // 20 at 200 was dropped by 30 at 150
		{30, 900, 150},
		{31, 900, 400},
		{41, 900, 900}, // no sample shows it: the receipt is all we know
		{10, 50, 50},   // received before any sample showed it: no wait
	} {
		if got := h.since(int64(tt.rev), at(tt.received)); !got.Equal(at(tt.want)) {
			t.Errorf("since(%d, %dms) = %v, want %dms", tt.rev, tt.received, got.Sub(t0), tt.want)
		}
	}
	if len(h.revs) != 3 {
		t.Errorf("samples %v, want the staircase 10, 30, 40", h.revs)
	}
	h.forget(30)
	if got := h.since(20, at(900)); !got.Equal(at(400)) {
		t.Errorf("after forgetting up to 30: since(20) = %v, want 400ms", got.Sub(t0))
	}
	for i := 1; i <= 2*maxHeadSamples; i++ {
		h.add(int64(100+i), at(1000+i))
	}
	if len(h.revs) > maxHeadSamples {
		t.Errorf("%d samples kept, want at most %d", len(h.revs), maxHeadSamples)
	}
}
