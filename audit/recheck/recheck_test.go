package recheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/recheck"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// story drives a tracker through one lock's history, by hand.
type story struct {
	t   *testing.T
	s   *sim
	out audit.Batch
}

func newStory(t *testing.T) *story {
	st := &story{t: t}
	st.s = &sim{tr: audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25}), out: &st.out, source: "src", at: t0}
	return st
}

func (st *story) grant(holder string, token int64, at time.Duration) {
	st.s.observe(audit.Observation{Kind: audit.EventGrant, At: t0.Add(at), Holder: holder, Token: audit.Int64(token), LeaseDuration: lease})
}

func (st *story) release(holder string, token int64, at time.Duration) {
	st.s.observe(audit.Observation{Kind: audit.EventRelease, At: t0.Add(at), Holder: holder, Token: audit.Int64(token)})
}

func (st *story) write(resource, holder string, token int64, outcome audit.WriteOutcome, at time.Duration) {
	st.out.Append(st.s.tr.ReportWrite(audit.WriteReport{Source: "src", Lock: lockName, Resource: resource, Holder: holder,
		Token: audit.Int64(token), Outcome: outcome, At: t0.Add(at)}))
}

// load stores the story and reads its history over the hour from t0, at
// most limit operations, and its verdict.
func (st *story) load(limit int) (recheck.History, verdict.Verdict) {
	st.t.Helper()
	ctx := context.Background()
	db := openStore(st.t)
	if err := db.Apply(ctx, st.out); err != nil {
		st.t.Fatal(err)
	}
	lock, err := db.LockByKey(ctx, audit.LockKey{Source: "src", Name: lockName})
	if err != nil {
		st.t.Fatal(err)
	}
	w := verdict.Window{From: t0, To: t0.Add(time.Hour)}
	h, err := recheck.Load(ctx, db, lock.ID, w, limit, w.To)
	if err != nil {
		st.t.Fatal(err)
	}
	v, err := verdict.Load(ctx, db, lock, w, "", w.To)
	if err != nil {
		st.t.Fatal(err)
	}
	return h, v
}

// Each story's history keeps or breaks each property as its verdict says,
// and Explain names the operation that breaks Lease and why.
func TestRecheckStories(t *testing.T) {
	const s = time.Second
	cases := []struct {
		name        string
		story       func(*story)
		lease, reg  bool
		verdict     verdict.Kind
		breaks, why string // Explain's operation (kind, holder) and words
	}{
		{"FencedHandover", func(st *story) {
			st.grant("a", 41, 0)
			st.write("db", "a", 41, audit.WriteAccepted, 1*s)
			st.release("a", 41, 2*s)
			st.grant("b", 42, 3*s)
			st.write("db", "b", 42, audit.WriteAccepted, 4*s)
			st.write("db", "a", 41, audit.WriteRejected, 5*s)
		}, true, true, verdict.Fenced, "", ""},
		{"ExposureKeepsRegisterBreaksLease", func(st *story) {
			st.grant("a", 41, 0)
			st.write("db", "a", 41, audit.WriteAccepted, 1*s)
			st.release("a", 41, 2*s)
			st.grant("b", 42, 3*s)
			// db has not seen 42 yet: by its rule 41 is still fine.
			st.write("db", "a", 41, audit.WriteAccepted, 4*s)
			st.write("db", "b", 42, audit.WriteAccepted, 5*s)
		}, false, true, verdict.Unsafe, "write a", "older than the newest grant"},
		{"ZombieAfterRelease", func(st *story) {
			st.grant("a", 41, 0)
			st.release("a", 41, 2*s)
			st.write("db", "a", 41, audit.WriteAccepted, 3*s)
		}, false, true, verdict.Unsafe, "write a", "had ended"},
		{"RegisterBrokenByTheResource", func(st *story) {
			st.grant("a", 41, 0)
			st.release("a", 41, 1*s)
			st.grant("b", 42, 2*s)
			st.write("db", "b", 42, audit.WriteAccepted, 3*s)
			st.write("db", "a", 41, audit.WriteAccepted, 4*s)
		}, false, false, verdict.Unsafe, "write a", "older than the newest grant"},
		{"OverlapWithAWrite", func(st *story) {
			st.grant("a", 41, 0)
			st.grant("b", 42, 5*s) // a's lease runs to 10 s
			st.write("db", "b", 42, audit.WriteAccepted, 6*s)
		}, false, true, verdict.Unsafe, "write b", "overlapped"},
		{"OverlapWithoutAWriteInIt", func(st *story) {
			st.grant("a", 41, 0)
			st.grant("b", 42, 5*s)
			st.write("db", "b", 42, audit.WriteAccepted, 11*s)
		}, true, true, verdict.Fenced, "", ""},
		{"RegressedTokenWritten", func(st *story) {
			st.grant("a", 41, 0)
			st.release("a", 41, 1*s)
			st.grant("b", 40, 2*s)
			st.write("cache", "b", 40, audit.WriteAccepted, 3*s)
		}, false, true, verdict.Unsafe, "write b", "went back"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStory(t)
			c.story(st)
			h, v := st.load(0)
			if v.Kind != c.verdict {
				t.Fatalf("verdict %s %v, want %s", v.Kind, codes(v), c.verdict)
			}
			if got := recheck.Check(h, recheck.Lease); got != c.lease {
				t.Errorf("Lease holds: %v, want %v\n%s", got, c.lease, dump(h))
			}
			if got := recheck.Check(h, recheck.Register); got != c.reg {
				t.Errorf("Register holds: %v, want %v\n%s", got, c.reg, dump(h))
			}
			i, why := recheck.Explain(h, recheck.Lease)
			if c.breaks == "" {
				if i >= 0 {
					t.Errorf("Explain: operation %d breaks Lease (%s), want none", i, why)
				}
				return
			}
			if i < 0 {
				t.Fatalf("Explain: nothing breaks Lease, want a %s", c.breaks)
			}
			op := h.Operations[i]
			if got := string(op.Input.Kind) + " " + op.Input.Holder; got != c.breaks || !strings.Contains(why, c.why) {
				t.Errorf("Explain: %s breaks Lease: %q; want a %s: ...%s...", got, why, c.breaks, c.why)
			}
		})
	}
}

// A window with more operations than asked for gives the newest, complete
// from where they start, with the grant of the tenure held there, and says
// so; the JSON of a history decodes to the same operations, which Porcupine
// judges alike.
func TestRecheckTruncatesAndRoundTrips(t *testing.T) {
	st := newStory(t)
	st.grant("a", 41, 0)
	st.release("a", 41, time.Second)
	st.grant("b", 42, 2*time.Second)
	for i := range 20 {
		st.write("db", "b", 42, audit.WriteAccepted, 3*time.Second+time.Duration(i)*time.Millisecond)
	}
	full, _ := st.load(0)
	if full.Truncated || len(full.Operations) != 23 || full.MaxOperations != recheck.MaxOperations {
		t.Fatalf("whole window: %d operations, truncated %v, max %d; want 23, false, %d", len(full.Operations), full.Truncated, full.MaxOperations, recheck.MaxOperations)
	}
	h, _ := st.load(10)
	if !h.Truncated || h.CompleteFrom == nil || len(h.Operations) != 10 || len(h.Notes) != 1 {
		t.Fatalf("limit 10: %d operations, truncated %v from %v, notes %q; want 10, truncated, one note", len(h.Operations), h.Truncated, h.CompleteFrom, h.Notes)
	}
	if first := h.Operations[0].Input; first.Kind != recheck.OpGrant || first.Holder != "b" {
		t.Errorf("the truncated history starts with %s of %q, want the grant of b's tenure, held where it starts", first.Kind, first.Holder)
	}
	if want := t0.Add(3*time.Second + 11*time.Millisecond); !h.CompleteFrom.Equal(want) {
		t.Errorf("complete from %v, want %v (the ninth newest write's)", h.CompleteFrom, want)
	}
	if h.Clients[h.Operations[0].ClientID] != "b" {
		t.Errorf("clients %q, the grant's client %d: want b's", h.Clients, h.Operations[0].ClientID)
	}

	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(full); err != nil {
		t.Fatal(err)
	}
	back, err := recheck.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Operations) != len(full.Operations) || recheck.Check(back, recheck.Lease) != recheck.Check(full, recheck.Lease) {
		t.Fatalf("decoded %d operations, Lease %v; want %d, %v", len(back.Operations), recheck.Check(back, recheck.Lease), len(full.Operations), recheck.Check(full, recheck.Lease))
	}
	// Porcupine draws it: the models describe each operation and state
	// (Register sees only the writes).
	for p, shows := range map[recheck.Property]string{recheck.Lease: "grant #2", recheck.Register: "write at db"} {
		m := recheck.Model(p)
		res, info := porcupine.CheckOperationsVerbose(m, back.Porcupine(), 0)
		if res != porcupine.Ok {
			t.Errorf("%s: %s, want Ok", p, res)
		}
		var page bytes.Buffer
		if err := porcupine.Visualize(m, info, &page); err != nil || !strings.Contains(page.String(), shows) {
			t.Errorf("%s: the visualization (%d bytes, %v) does not show %q", p, page.Len(), err, shows)
		}
	}
	for _, bad := range []string{
		`{"operations":[{"input":{"kind":"renew","at":1},"call":1,"return":1}]}`,
		`{"operations":[{"input":{"kind":"write","at":1},"output":"maybe","call":1,"return":1}]}`,
		`{"operations":[{"input":{"kind":"grant","at":1},"call":1,"return":2}]}`,
	} {
		if _, err := recheck.Decode(strings.NewReader(bad)); err == nil {
			t.Errorf("Decode(%s): no error", bad)
		}
	}
}

// BenchmarkCheck checks a history as large as the export serves (10,000
// operations: tenures of a grant, 48 writes and a release, with a stale
// write rejected after each handover) against each property.
func BenchmarkCheck(b *testing.B) {
	var h recheck.History
	at := t0.UnixNano()
	add := func(in recheck.Input, out audit.WriteOutcome) {
		at += int64(time.Millisecond)
		in.At = at
		op := recheck.Operation{Input: in, Call: at, Return: at}
		if out != "" {
			op.Output = &out
		}
		h.Operations = append(h.Operations, op)
	}
	for seq := int64(1); len(h.Operations) < recheck.MaxOperations-50; seq++ {
		token := audit.Int64(100 + seq)
		add(recheck.Input{Kind: recheck.OpGrant, Seq: seq, Holder: "a", Token: token, Expires: at + int64(time.Minute)}, "")
		add(recheck.Input{Kind: recheck.OpWrite, Holder: "b", Token: audit.Int64(*token - 1), Resource: "db"}, audit.WriteRejected)
		for range 47 {
			add(recheck.Input{Kind: recheck.OpWrite, Holder: "a", Token: token, Resource: "db"}, audit.WriteAccepted)
		}
		add(recheck.Input{Kind: recheck.OpEnd, Seq: seq, Holder: "a", Token: token, Reason: audit.EndReleased}, "")
	}
	for _, p := range recheck.Properties {
		b.Run(string(p), func(b *testing.B) {
			for b.Loop() {
				if !recheck.Check(h, p) {
					b.Fatal("a fenced history breaks " + string(p))
				}
			}
		})
	}
}
