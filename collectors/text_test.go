package collectors

import (
	"slices"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

func TestAsText(t *testing.T) {
	ob := audit.Observation{
		Lock:     audit.LockKey{Source: "cache", Name: "lock:\xfe"},
		Holder:   "holder\x1b[2J",
		Position: "7",
		Detail:   map[string]any{"value": "1:\xff", "count": 2, "queue": []string{"0x1 a\x00", "0x2"}},
	}
	AsText(&ob)
	if ob.Lock.Name != `lock:\xfe` || ob.Holder != `holder\x1b[2J` || ob.Position != "7" {
		t.Fatalf("AsText gave name %q, holder %q, position %q", ob.Lock.Name, ob.Holder, ob.Position)
	}
	if ob.Detail["value"] != `1:\xff` || ob.Detail["count"] != 2 || !slices.Equal(ob.Detail["queue"].([]string), []string{`0x1 a\x00`, "0x2"}) {
		t.Fatalf("AsText gave detail %v", ob.Detail)
	}
}
