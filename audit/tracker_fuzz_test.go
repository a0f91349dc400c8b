package audit_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// FuzzTracker drives a Tracker with a sequence of collector inputs, clock
// ticks and write reports decoded from the fuzz input (see trackerScript),
// writes everything it emits to a real SQLite store, and checks what it
// emitted and what the store then holds for each lock:
//
//   - tenures are numbered 1, 2, 3... in grant order; each but the last has
//     ended, and none ends before it began;
//   - two tenures never overlap without an overlap finding: when a tenure
//     was granted while the previous one was still held (not yet released
//     or expired) or, superseded, its lease still ran, the store holds an
//     overlap finding at the later grant;
//   - a grant whose token is lower than the last token granted before it
//     always has a token_regression finding naming both tokens;
//   - ticks change when the tracker records an end, never what it records:
//     the same script run without its ticks, and with a tick before every
//     step, then followed by one last tick long after, ends every tenure
//     with the same reason at the same time, and makes the same findings.
//
// And nothing panics. Run longer with
// go test -run '^$' -fuzz FuzzTracker -fuzztime 10m ./audit
func FuzzTracker(f *testing.F) {
	for _, seed := range [][]byte{
		// etcd: A granted token 41, renews, B granted 42 while A's lease runs (overlap).
		{0x00, 0x00, 0x00, 41, 0xc2, 0x20, 0x00, 41, 0x05, 0x00, 0x01, 42, 0x45},
		// Clock expiry: the collector vouches for 4.1 s (a grant on the other
		// lock) after A's lease ran out at 3 s; B's grant comes at 4.4 s.
		{0x06, 0x00, 0x00, 1, 0x80, 0x10, 0x02, 5, 0x29, 0x00, 0x01, 2, 0x83},
		// Clock expiry: A renews after its lease ran out, then releases late.
		{0x06, 0x00, 0x00, 1, 0x40, 0x02, 0x00, 1, 0x0b, 0x10, 0x01, 3, 0x0b, 0x03, 0x00, 1, 0x13, 0x05, 0x00, 0, 0x01},
		// Kubernetes, clock expiry: A (1) expires by the tracker's clock, B (0) regresses.
		{0x03, 0x00, 0x00, 2, 0x85, 0x05, 0x00, 0, 0x3f, 0x00, 0x01, 1, 0x41},
		// Redis, counter tokens: a skip, a release, a snapshot without the lock.
		{0x06, 0x00, 0x00, 7, 0x83, 0x00, 0x01, 9, 0x43, 0x03, 0x01, 9, 0x02, 0x06, 0x00, 0, 0x01},
		// Observed at start, blind window, inferred grant by a renewal of another holder.
		{0x03, 0x01, 0x00, 5, 0xc1, 0x07, 0x00, 0, 0x10, 0x02, 0x02, 6, 0x81},
		// Write reports around a handover: stale and unfenced writes, exposure.
		{0x00, 0x00, 0x00, 41, 0xc2, 0x00, 0x01, 42, 0x4a, 0x08, 0x00, 41, 0x01, 0x09, 0x00, 41, 0x01, 0x08, 0x01, 42, 0x02},
		// Untokened grants, a deletion and an eviction, renewals with an earlier renew time.
		{0x06, 0x00, 0x02, 0xff, 0x81, 0x02, 0x06, 0xff, 0x01, 0x0b, 0x02, 0xff, 0x02, 0x00, 0x03, 3, 0x81, 0x0c, 0x03, 3, 0x01},
		// Two locks, tokens going backwards on one while the other is held.
		{0x00, 0x00, 0x00, 10, 0xc1, 0x10, 0x01, 20, 0xc1, 0x00, 0x02, 5, 0xc1, 0x10, 0x03, 19, 0x01},
	} {
		f.Add(seed)
	}
	// SQLite built with the fuzzer's coverage instrumentation runs a few
	// hundred inputs a second at best, so while fuzzing the invariants are
	// checked on what the tracker emits, and on the store too only with
	// LEASEWATCH_FUZZ_STORE=1. The seeds in a plain go test use both.
	withStore := flag.Lookup("test.fuzz").Value.String() == "" || os.Getenv("LEASEWATCH_FUZZ_STORE") == "1"
	store, err := sqlite.Open(context.Background(), filepath.Join(f.TempDir(), "leasewatch.db"))
	if err != nil {
		f.Fatalf("open store: %v", err)
	}
	f.Cleanup(func() { store.Close() })
	var runs atomic.Int64

	f.Fuzz(func(t *testing.T, data []byte) {
		// Each run has a source of its own in the shared store.
		source := fmt.Sprintf("src-%d", runs.Add(1))
		script := decodeTrackerScript(source, data)
		_, all := script.run(ticksAsScripted)
		emitted := tenuresOf(all)
		for _, key := range script.locks {
			var findings []audit.Finding
			for _, fd := range all.Findings {
				if fd.Lock == key {
					findings = append(findings, fd)
				}
			}
			checkTenures(t, key, emitted[key], findings, script)
		}
		checkTicksChangeNothing(t, script)
		if !withStore {
			return
		}

		// And the same in the store.
		ctx := context.Background()
		if err := store.Apply(ctx, all); err != nil {
			t.Fatalf("apply %d tenures, %d events, %d findings: %v", len(all.Tenures), len(all.Events), len(all.Findings), err)
		}
		for _, key := range script.locks {
			l, err := store.LockByKey(ctx, key)
			if audit.ErrorCode(err) == audit.ENOTFOUND {
				continue
			}
			if err != nil {
				t.Fatalf("lock %s: %v", key, err)
			}
			tenures, err := store.Tenures(ctx, l.ID, audit.TimeFilter{})
			if err != nil {
				t.Fatalf("tenures of %s: %v", key, err)
			}
			findings, err := store.Findings(ctx, audit.FindingFilter{LockID: l.ID})
			if err != nil {
				t.Fatalf("findings of %s: %v", key, err)
			}
			checkTenures(t, key, tenures, findings, script)
		}
	})
}

// Where a script's ticks go, for checkTicksChangeNothing.
const (
	ticksAsScripted = iota
	ticksNone
	ticksBeforeEveryStep
)

// run drives a new tracker through the script, with its ticks placed as
// ticks says, and returns the tracker and everything it emitted.
func (s trackerScript) run(ticks int) (*audit.Tracker, audit.Batch) {
	tr := audit.NewTracker(audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{s.locks[0].Source: s.kind}})
	var all audit.Batch
	for _, step := range s.steps {
		if ticks == ticksBeforeEveryStep {
			all.Append(tr.Tick(step.at))
		}
		switch {
		case step.tick:
			if ticks == ticksAsScripted {
				all.Append(tr.Tick(step.at))
			}
		case step.write != nil:
			all.Append(tr.ReportWrite(*step.write))
		default:
			all.Append(tr.Step(step.input))
		}
	}
	return tr, all
}

// tenuresOf returns the tenures in b by lock, each as its last write left it.
func tenuresOf(b audit.Batch) map[audit.LockKey][]audit.Tenure {
	out := make(map[audit.LockKey][]audit.Tenure)
	for _, ten := range b.Tenures {
		list := out[ten.Lock]
		if i := int(ten.Seq) - 1; i >= 0 && i < len(list) {
			list[i] = ten
		} else {
			list = append(list, ten)
		}
		out[ten.Lock] = list
	}
	return out
}

// checkTicksChangeNothing runs the script without its ticks and with a tick
// before every step, each followed by the collector vouching for an hour
// later and a tick then, so that every lease has run out, and checks that
// every tenure ends the same way at the same time, with the same findings,
// as the script itself followed by the same.
func checkTicksChangeNothing(t *testing.T, script trackerScript) {
	t.Helper()
	type end struct {
		seq     int64
		holder  string
		token   string
		granted time.Time
		end     audit.EndReason
		ended   time.Time
	}
	type outcome struct {
		ends     map[audit.LockKey][]end
		findings []string
	}
	if len(script.steps) == 0 {
		return
	}
	// Every step carries the source's input flags; the last input keeps them.
	late := script.steps[len(script.steps)-1].at.Add(time.Hour)
	vouch := script.steps[0].input
	vouch.At, vouch.Live, vouch.Blind, vouch.Snapshot, vouch.Observations = late, true, nil, false, nil
	outcomeOf := func(ticks int) outcome {
		tr, b := script.run(ticks)
		b.Append(tr.Step(vouch))
		b.Append(tr.Tick(late))
		o := outcome{ends: make(map[audit.LockKey][]end)}
		for key, list := range tenuresOf(b) {
			for _, ten := range list {
				o.ends[key] = append(o.ends[key], end{ten.Seq, ten.Holder, fmtToken(ten.Token), ten.GrantedAt, ten.End, ten.EndedAt})
			}
		}
		for _, f := range b.Findings {
			o.findings = append(o.findings, fmt.Sprintf("%s %s at %v tokens %v", f.Lock.Name, f.Kind, f.At.Sub(script.base), f.Tokens))
		}
		slices.Sort(o.findings)
		return o
	}
	want := outcomeOf(ticksAsScripted)
	for _, ticks := range []int{ticksNone, ticksBeforeEveryStep} {
		got := outcomeOf(ticks)
		name := map[int]string{ticksNone: "without its ticks", ticksBeforeEveryStep: "with a tick before every step"}[ticks]
		for _, key := range script.locks {
			if !slices.Equal(got.ends[key], want.ends[key]) {
				t.Fatalf("%s: run %s, tenures\n  %+v\nwant, as scripted,\n  %+v\n%s", key, name, got.ends[key], want.ends[key], script)
			}
		}
		if !slices.Equal(got.findings, want.findings) {
			t.Fatalf("run %s, findings\n  %v\nwant, as scripted,\n  %v\n%s", name, got.findings, want.findings, script)
		}
	}
}

// checkTenures checks one lock's stored tenures against its findings.
func checkTenures(t *testing.T, key audit.LockKey, tenures []audit.Tenure, findings []audit.Finding, script trackerScript) {
	t.Helper()
	has := func(kind audit.FindingKind, at time.Time, tokens ...int64) bool {
		return slices.ContainsFunc(findings, func(f audit.Finding) bool {
			return f.Kind == kind && f.At.Equal(at) && (tokens == nil || slices.Equal(f.Tokens, tokens))
		})
	}
	var lastToken *int64
	for i, ten := range tenures {
		if ten.Seq != int64(i+1) {
			t.Fatalf("%s: tenure %d has seq %d\n%s", key, i, ten.Seq, script)
		}
		if !ten.Held() && ten.EndedAt.Before(ten.GrantedAt) {
			t.Fatalf("%s: tenure %d ended at %v, before it was granted at %v\n%s", key, ten.Seq, ten.EndedAt, ten.GrantedAt, script)
		}
		if i > 0 {
			prev := tenures[i-1]
			if prev.Held() {
				t.Fatalf("%s: tenure %d granted while tenure %d is still held\n%s", key, ten.Seq, prev.Seq, script)
			}
			// How long the previous holder could believe it held the lock.
			heldTo := prev.EndedAt
			if prev.End == audit.EndSuperseded && prev.ExpiresAt.After(heldTo) {
				heldTo = prev.ExpiresAt
			}
			if ten.GrantedAt.Before(heldTo) && !has(audit.FindingOverlap, ten.GrantedAt) {
				t.Fatalf("%s: tenure %d (%s) granted at %v while tenure %d (%s, %s at %v, lease to %v) held it, without an overlap finding\n%s",
					key, ten.Seq, ten.Holder, ten.GrantedAt, prev.Seq, prev.Holder, prev.End, prev.EndedAt, prev.ExpiresAt, script)
			}
		}
		if ten.Token != nil {
			if lastToken != nil && *ten.Token < *lastToken && !has(audit.FindingTokenRegression, ten.GrantedAt, *lastToken, *ten.Token) {
				t.Fatalf("%s: tenure %d has token %d after token %d, without a token_regression finding\n%s",
					key, ten.Seq, *ten.Token, *lastToken, script)
			}
			lastToken = ten.Token
		}
	}
}

// trackerScript is a fuzz input decoded into tracker steps.
//
// The first byte picks the source kind and its flags: bits 0-1 the kind
// (etcd, kubernetes, redis), bit 1 also ExpireByClock, bit 2
// SequentialTokens. Then every 4 bytes are one step:
//
//	op:     bits 0-3 the step (below), bit 4 the lock (two locks)
//	who:    bits 0-1 the holder ("A", "B", "C" or none), bits 2-3 how much
//	        earlier than the step the holder renewed (RenewedAt), bit 4 Inferred
//	token:  the fencing token; 0xff none
//	time:   bits 0-5 the time since the previous step in 100 ms units,
//	        bits 6-7 the lease duration (unknown, 1 s, 3 s, 10 s)
//
// Steps: 0 grant, 1 observed, 2 renew, 3 release, 4 expire, 5 tick, 6 an
// empty snapshot, 7 a blind window since the previous step, 8 a write
// accepted, 9 a write rejected, 10 an overtaken renewal, 11 a deletion,
// 12 an eviction, 13-15 a snapshot holding this lock as granted. Time only
// moves forward: the collectors' clock is the tracker's only clock.
type trackerScript struct {
	kind  audit.SourceKind
	base  time.Time
	locks []audit.LockKey
	steps []trackerStep
}

type trackerStep struct {
	at    time.Time
	tick  bool
	write *audit.WriteReport
	input audit.Input
	what  string
}

func (s trackerScript) String() string {
	out := fmt.Sprintf("script (%s):", s.kind)
	for _, st := range s.steps {
		out += "\n  " + st.what
	}
	return out
}

const maxTrackerSteps = 64

func decodeTrackerScript(source string, data []byte) trackerScript {
	s := trackerScript{kind: audit.KindEtcd}
	var flags byte
	if len(data) > 0 {
		flags, data = data[0], data[1:]
	}
	s.kind = []audit.SourceKind{audit.KindEtcd, audit.KindKubernetes, audit.KindRedis, audit.KindRedis}[flags&3]
	byClock := flags&2 != 0
	sequential := flags&4 != 0
	s.locks = []audit.LockKey{{Source: source, Name: "/locks/a"}, {Source: source, Name: "/locks/b"}}
	s.base = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	at := s.base
	for len(data) >= 4 && len(s.steps) < maxTrackerSteps {
		op, who, tok, tm := data[0], data[1], data[2], data[3]
		data = data[4:]
		prev := at
		at = at.Add(time.Duration(tm&0x3f) * 100 * time.Millisecond)
		lease := []time.Duration{0, time.Second, 3 * time.Second, 10 * time.Second}[tm>>6]
		holder := []string{"A", "B", "C", ""}[who&3]
		var token *int64
		if tok != 0xff {
			token = audit.Int64(int64(tok))
		}
		lock := s.locks[(op>>4)&1]
		ob := audit.Observation{Lock: lock, At: at, Holder: holder, Token: token, LeaseDuration: lease, Inferred: who&0x10 != 0}
		if back := (who >> 2) & 3; back != 0 {
			ob.RenewedAt = at.Add(-time.Duration(back) * 500 * time.Millisecond)
		}
		in := audit.Input{Source: source, Kind: s.kind, At: at, ExpireByClock: byClock, Live: true, SequentialTokens: sequential}
		step := trackerStep{at: at}
		switch code := op & 0x0f; code {
		case 0, 1, 2, 3, 4, 10, 11, 12:
			ob.Kind = map[byte]audit.EventKind{0: audit.EventGrant, 1: audit.EventObserved, 2: audit.EventRenew, 3: audit.EventRelease,
				4: audit.EventExpire, 10: audit.EventRenew, 11: audit.EventRelease, 12: audit.EventRelease}[code]
			ob.Overtaken, ob.Deleted, ob.Evicted = code == 10, code == 11, code == 12
			in.Observations = []audit.Observation{ob}
		case 5:
			step.tick = true
		case 6:
			in.Snapshot = true
		case 7:
			in.Blind = &audit.Blind{From: prev, To: at, Reason: "disconnected"}
		case 8, 9:
			outcome := audit.WriteAccepted
			if code == 9 {
				outcome = audit.WriteRejected
			}
			step.write = &audit.WriteReport{Source: source, Lock: lock.Name, Resource: "ledger", Token: token,
				Outcome: outcome, Holder: holder, At: at}
		default:
			ob.Kind = audit.EventGrant
			in.Snapshot, in.Observations = true, []audit.Observation{ob}
		}
		step.input = in
		step.what = fmt.Sprintf("+%v %s op=%d holder=%q token=%v lease=%v renewed=-%v inferred=%v",
			at.Sub(s.base), lock.Name, op&0x0f, holder, fmtToken(token), lease, at.Sub(orAt(ob.RenewedAt, at)), ob.Inferred)
		s.steps = append(s.steps, step)
	}
	return s
}

func orAt(t, at time.Time) time.Time {
	if t.IsZero() {
		return at
	}
	return t
}

func fmtToken(t *int64) string {
	if t == nil {
		return "none"
	}
	return fmt.Sprint(*t)
}
