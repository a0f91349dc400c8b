package audit_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// TestRecorderInputWrites: the writes a collector saw (Input.Writes) are
// recorded with its input, in its transaction, and judged as reports are:
// a write under a superseded token is an unfenced write. An input whose
// writes cannot be taken is refused whole: neither its observations nor
// its cursor are stored.
func TestRecorderInputWrites(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	ctx := context.Background()
	rec := storetest.StartRecorder(t, st, audit.WithWriteOnlyLocks(1))
	write := func(token int64, d time.Duration) audit.WriteReport {
		return audit.WriteReport{Source: "src", Lock: "orders", Resource: "invoices/1", Token: audit.Int64(token), Outcome: audit.WriteAccepted, At: at(d)}
	}
	in := storetest.GrantInput("A", 1, at(0), "c1")
	in.Writes = []audit.WriteReport{write(1, time.Second)}
	if err := rec.Record(ctx, in); err != nil {
		t.Fatal(err)
	}
	in = storetest.GrantInput("B", 2, at(2*time.Second), "c2")
	in.Writes = []audit.WriteReport{write(1, 3*time.Second)}
	if err := rec.Record(ctx, in); err != nil {
		t.Fatal(err)
	}
	want := []audit.EventKind{audit.EventGrant, audit.EventWriteAccepted, audit.EventGrant, audit.EventWriteAccepted}
	if got := storetest.EventKinds(t, st); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if cur, _ := rec.Cursor("src"); cur != "c2" {
		t.Fatalf("cursor %q, want c2", cur)
	}
	found, err := st.Findings(ctx, audit.FindingFilter{Kind: audit.FindingUnfencedWrite, TimeFilter: audit.TimeFilter{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !slices.Equal(found[0].Tokens, []int64{1, 2}) {
		t.Fatalf("unfenced writes %+v; want the write under 1 after 2 was granted", found)
	}

	// Two locks no grant names, one past the bound: refused whole.
	in = storetest.GrantInput("C", 3, at(4*time.Second), "c3")
	in.Writes = []audit.WriteReport{write(3, 5*time.Second), write(3, 5*time.Second), write(3, 5*time.Second)}
	in.Writes[1].Lock, in.Writes[2].Lock = "payments", "refunds"
	if err := rec.Record(ctx, in); audit.ErrorCode(err) != audit.EINVALID {
		t.Fatalf("Record past the write-only bound: %v, want EINVALID", err)
	}
	if got := storetest.EventKinds(t, st); !slices.Equal(got, want) {
		t.Fatalf("events %v after the refusal, want %v: nothing of it", got, want)
	}
	if cur, _ := rec.Cursor("src"); cur != "c2" {
		t.Fatalf("cursor %q after the refusal, want c2", cur)
	}
}
