// Package collectortest is what every collector's tests share: a sink that
// is the real Recorder over a real SQLite store, running a collector until
// the test ends, polling for a condition, and the contract suite (Test)
// that every backend passes against its real server. A backend package
// supplies only how to start its server and how to drive its locks.
package collectortest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// Sink is a collectors.Sink and collectors.Submitter for tests: the real
// Recorder over a real SQLite store, its tracker's clock ticking every
// 50 ms. It keeps every input it was handed, in order, for assertions on
// the observations themselves.
type Sink struct {
	Source string
	Store  *sqlite.Store
	Path   string // the store's file: a second sink on it is a restart

	rec    *audit.Recorder
	closed sync.Once

	mu     sync.Mutex
	inputs []audit.Input
}

// SinkOption changes how NewSink builds a sink.
type SinkOption func(*sinkConfig)

type sinkConfig struct {
	path    string
	tracker audit.TrackerConfig
}

// AtPath opens the store at path instead of a new one in the test's
// directory: a second sink on one path is leasewatch restarted.
func AtPath(path string) SinkOption { return func(c *sinkConfig) { c.path = path } }

// RenewMargin sets the tracker's renew-margin ratio.
func RenewMargin(ratio float64) SinkOption {
	return func(c *sinkConfig) { c.tracker.RenewMarginRatio = ratio }
}

// NewSink opens a store and starts a recorder on it for the source named
// source, of kind. Both are closed when the test ends, or by Close.
func NewSink(t testing.TB, source string, kind audit.SourceKind, opts ...SinkOption) *Sink {
	t.Helper()
	cfg := sinkConfig{tracker: audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{source: kind}}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.path == "" {
		cfg.path = filepath.Join(t.TempDir(), "leasewatch.db")
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, cfg.path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	rec := audit.NewRecorder(st, cfg.tracker, nil, audit.WithTickInterval(50*time.Millisecond))
	if err := rec.Start(ctx); err != nil {
		st.Close()
		t.Fatalf("start recorder: %v", err)
	}
	s := &Sink{Source: source, Store: st, Path: cfg.path, rec: rec}
	t.Cleanup(s.Close)
	return s
}

// Close stops the recorder and closes the store. Safe to call twice.
func (s *Sink) Close() {
	s.closed.Do(func() {
		s.rec.Close()
		s.Store.Close()
	})
}

// Recorder is the sink's recorder.
func (s *Sink) Recorder() *audit.Recorder { return s.rec }

// Record notes in, then stores it: an input whose events a test has seen
// in the store is already among Inputs.
func (s *Sink) Record(ctx context.Context, in audit.Input) error {
	s.note(in)
	return s.rec.Record(ctx, in)
}

// Submit is the recorder's, so a collector pipelines as it does in
// leasewatch; in is noted first, as by Record.
func (s *Sink) Submit(ctx context.Context, in audit.Input) func() error {
	s.note(in)
	return s.rec.Submit(ctx, in)
}

// Cursor is the recorder's.
func (s *Sink) Cursor(source string) (string, time.Time) { return s.rec.Cursor(source) }

func (s *Sink) note(in audit.Input) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inputs = append(s.inputs, in)
}

// Inputs returns every input the sink was handed, in order.
func (s *Sink) Inputs() []audit.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.inputs)
}

// Blinds returns the blind windows of the inputs, in order.
func (s *Sink) Blinds() []audit.Blind {
	var out []audit.Blind
	for _, in := range s.Inputs() {
		if in.Blind != nil {
			out = append(out, *in.Blind)
		}
	}
	return out
}

// Obs returns the observations of lock (every lock if "") of the given
// kinds (every kind if none), in order.
func (s *Sink) Obs(lock string, kinds ...audit.EventKind) []audit.Observation {
	var out []audit.Observation
	for _, in := range s.Inputs() {
		for _, ob := range in.Observations {
			if (lock == "" || ob.Lock.Name == lock) && (len(kinds) == 0 || slices.Contains(kinds, ob.Kind)) {
				out = append(out, ob)
			}
		}
	}
	return out
}

// Lock returns the stored lock, if the store has it.
func (s *Sink) Lock(t testing.TB, name string) (audit.Lock, bool) {
	t.Helper()
	l, err := s.Store.LockByKey(context.Background(), audit.LockKey{Source: s.Source, Name: name})
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return audit.Lock{}, false
	}
	if err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
	return l, true
}

// Events returns the stored events of lock of the given kinds (all if
// none), in time order.
func (s *Sink) Events(t testing.TB, lock string, kinds ...audit.EventKind) []audit.Event {
	t.Helper()
	l, ok := s.Lock(t, lock)
	if !ok {
		return nil
	}
	evs, err := s.Store.Events(context.Background(), l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 10000}})
	if err != nil {
		t.Fatalf("events of %s: %v", lock, err)
	}
	var out []audit.Event
	for _, e := range evs {
		if len(kinds) == 0 || slices.Contains(kinds, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

// Findings returns the stored findings of lock (every lock if "") of the
// given kinds (all if none).
func (s *Sink) Findings(t testing.TB, lock string, kinds ...audit.FindingKind) []audit.Finding {
	t.Helper()
	f := audit.FindingFilter{TimeFilter: audit.TimeFilter{Limit: 10000}}
	if lock != "" {
		l, ok := s.Lock(t, lock)
		if !ok {
			return nil
		}
		f.LockID = l.ID
	}
	all, err := s.Store.Findings(context.Background(), f)
	if err != nil {
		t.Fatalf("findings of %s: %v", lock, err)
	}
	var out []audit.Finding
	for _, fd := range all {
		if len(kinds) == 0 || slices.Contains(kinds, fd.Kind) {
			out = append(out, fd)
		}
	}
	return out
}

// Tenures returns the stored tenures of lock.
func (s *Sink) Tenures(t testing.TB, lock string) []audit.Tenure {
	t.Helper()
	l, ok := s.Lock(t, lock)
	if !ok {
		return nil
	}
	ts, err := s.Store.Tenures(context.Background(), l.ID, audit.TimeFilter{Limit: 10000})
	if err != nil {
		t.Fatalf("tenures of %s: %v", lock, err)
	}
	return ts
}

// WaitEvents polls the store until lock has at least n events of kinds
// and returns them.
func (s *Sink) WaitEvents(t testing.TB, timeout time.Duration, lock string, n int, kinds ...audit.EventKind) []audit.Event {
	t.Helper()
	var got []audit.Event
	Eventually(t, timeout, fmt.Sprintf("%d %v event(s) of %s", n, kinds, lock), func() bool {
		got = s.Events(t, lock, kinds...)
		return len(got) >= n
	})
	return got
}

// WaitHeld polls the store until lock is held by holder and returns it.
func (s *Sink) WaitHeld(t testing.TB, timeout time.Duration, lock, holder string) audit.Lock {
	t.Helper()
	var l audit.Lock
	Eventually(t, timeout, fmt.Sprintf("%s held by %s", lock, holder), func() bool {
		var ok bool
		l, ok = s.Lock(t, lock)
		return ok && l.State == audit.StateHeld && l.Holder == holder
	})
	return l
}

// WaitFindings polls the store until lock has a finding of kind.
func (s *Sink) WaitFindings(t testing.TB, timeout time.Duration, lock string, kind audit.FindingKind) []audit.Finding {
	t.Helper()
	var got []audit.Finding
	Eventually(t, timeout, fmt.Sprintf("a %s finding on %s", kind, lock), func() bool {
		got = s.Findings(t, lock, kind)
		return len(got) > 0
	})
	return got
}

// NoFindings fails the test if lock has findings of any of kinds.
func (s *Sink) NoFindings(t testing.TB, lock string, kinds ...audit.FindingKind) {
	t.Helper()
	for _, f := range s.Findings(t, lock, kinds...) {
		t.Errorf("unexpected %s finding on %s: %s", f.Kind, lock, f.Summary)
	}
}

// Holders returns the holders of evs, in order.
func Holders(evs []audit.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Holder)
	}
	return out
}

// Kinds returns the kinds of evs, in order.
func Kinds(evs []audit.Event) []audit.EventKind {
	out := make([]audit.EventKind, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Kind)
	}
	return out
}
