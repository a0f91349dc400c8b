package backends

import (
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// Every source kind of the contract has its backend, declared once.
func TestEveryKindHasOneBackend(t *testing.T) {
	got := All()
	if len(got) != len(audit.SourceKinds) {
		t.Fatalf("%d backends for %d kinds", len(got), len(audit.SourceKinds))
	}
	for i, kind := range audit.SourceKinds {
		if got[i].Kind != kind {
			t.Errorf("backend %d is %q, want %q", i, got[i].Kind, kind)
		}
		if b, ok := Of(kind); !ok || b.Kind != kind {
			t.Errorf("Of(%q) = %q, %v", kind, b.Kind, ok)
		}
	}
	if _, ok := Of("consul"); ok {
		t.Error("Of(consul) found a backend")
	}
}
