package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Fencing in the recorder. When replicas share a store, a replica records
// only the sources it owns, each under its ownership token: SetFence when it
// is granted one, and every batch then carries the fences of the sources
// whose rows it holds. A store that refuses a batch (EFENCED) says another
// replica owns a source now: the recorder gives that source up at once and
// commits the rest of the group without it.

// FenceRefusal is what the store refused of a source whose fence had moved
// past this recorder's token, for the WithFenceRefused hook.
type FenceRefusal struct {
	Source  string
	Token   int64 // the token this recorder wrote under
	Highest int64 // the store's fence of the source, a newer owner's
	At      time.Time
	// Inputs and Writes are the collector inputs and write reports of the
	// source that were refused; Events, the source's events in the refused
	// batch; Renewals, the source's renewals not yet in its lock rows that
	// this recorder forgot (the renew events are stored).
	Inputs, Writes, Events, Renewals int
}

// LoggedRefusal is a FenceRefusal kept in the store (Batch.Refusals) until
// the owner of leasewatch's own source records it as a rejected write on
// the ownership lock of the refused source (WithOwnLocks): a deposed replica
// owns nothing it could record it under itself.
type LoggedRefusal struct {
	ID int64 // given by the store
	FenceRefusal
	Replica string // the identity of the replica refused
}

// OwnLocks is leasewatch's own source, for WithOwnLocks: the source whose
// locks are the ownership leases of the sources replicas share.
type OwnLocks struct {
	Source string
	// Lock names the lock of source's ownership lease within Source.
	Lock func(source string) string
	// Replica is this replica's identity: the holder of its refused writes.
	Replica string
}

// refusalsEvery is how often the owner of leasewatch's own source looks for
// fence refusals to record.
const refusalsEvery = time.Second

// maxRefusals bounds the refusals one commit records.
const maxRefusals = 100

// WithOwnLocks makes each commit the store's fence refuses show on
// leasewatch's own dashboard, as the write it is: the replica, deposed,
// tried to write to the store (resource "store") under its old token. The
// refused replica logs the refusal in the store (Batch.Refusals); the
// replica that owns own.Source records it, about once a second, as a
// rejected write on the ownership lock of the refused source, which the
// tracker judges as any other (a stale_write, with the exposure window of
// the handover).
func WithOwnLocks(own OwnLocks) RecorderOption { return func(r *Recorder) { r.own = own } }

// WithFenceRefused calls fn, on the recording goroutine, each time the store
// refuses a source's rows because a newer owner holds it, after the
// recorder has given the source up and before it answers the source's
// refused requests: the caller stops the source's collector and reports it. fn must be quick and must not call the recorder.
func WithFenceRefused(fn func(FenceRefusal)) RecorderOption {
	return func(r *Recorder) { r.onFenceRefused = fn }
}

// WithOwnership makes the recorder one of several replicas that share the
// journal, each recording the sources it owns: it records only the sources
// SetFence grants it. It restores none at Start; it loads a source from the
// journal (Journal.RestoreSource) when it is granted, after its fence has
// moved, so it sees every row the previous owner committed; it refuses the
// inputs and write reports of every other source with EFENCED, which the
// sender may retry at the owner; and its syncs claim only its own sources'
// rows (Batch.SyncSources).
func WithOwnership() RecorderOption { return func(r *Recorder) { r.owning = true } }

// notOwned is the refusal of a request naming a source that another replica
// records.
func notOwned(source string) error {
	return Errorf(EFENCED, "source %q is recorded by another replica: nothing was stored; send it again, to the replica that owns the source", source)
}

// owned returns the sources this recorder owns, sorted.
func (r *Recorder) owned() []string {
	return slices.Sorted(maps.Keys(r.fences))
}

// scopeSync limits b's sync claims to the sources the recorder owns, with
// WithOwnership: a round claims those it owned when it began and owns
// still. A recorder that owns none claims nothing.
func (r *Recorder) scopeSync(b Batch) Batch {
	if !r.owning {
		return b
	}
	if b.SyncMark {
		r.roundSources = r.owned()
	}
	switch {
	case b.Synced:
		b.SyncSources = r.owned()
	case b.SyncedToMark:
		b.SyncSources = slices.Clone(r.roundSources)
	default:
		return b
	}
	if len(b.SyncSources) == 0 {
		b.Synced, b.SyncedToMark = false, false
	}
	return b
}

// fenceChange is a SetFence or DropFence request.
type fenceChange struct {
	source string
	token  int64
	drop   bool
}

// SetFence makes the recorder write source's rows under token, the fencing
// token of this replica's grant of the source, and records source again if
// it had given it up. It returns once the store's fence of the source is at
// token, so that from then on no other replica's batch under an older token
// lands: EFENCED if the store already holds a newer one. Call it before the
// source's collector starts.
func (r *Recorder) SetFence(ctx context.Context, source string, token int64) error {
	return r.do(ctx, &request{fence: &fenceChange{source: source, token: token}})
}

// DropFence gives source up: the recorder forgets its tracker state, cursor
// and renewals not yet in its rows, and refuses its inputs and write
// reports (EFENCED) until SetFence. Call it once the source's collector has
// stopped, when this replica's grant of the source ends.
func (r *Recorder) DropFence(ctx context.Context, source string) error {
	return r.do(ctx, &request{fence: &fenceChange{source: source, drop: true}})
}

// changeFence carries out a fence request; recording goroutine only.
func (r *Recorder) changeFence(req *request) {
	c := req.fence
	if c.drop {
		r.handOver(c.source)
		r.disown(c.source, Errorf(EFENCED, "source %q is not recorded here: this replica gave its ownership up", c.source))
		req.done <- nil
		return
	}
	ctx := context.Background()
	err := r.journal.Apply(ctx, Batch{Fences: []Fence{{Source: c.source, Token: c.token}}})
	if err == nil && r.owning {
		err = r.loadSource(ctx, c.source)
	}
	if err == nil {
		r.fences[c.source] = c.token
		delete(r.disowned, c.source)
	}
	req.done <- err
}

// loadSource replaces what the recorder knows of source with what the
// journal holds: its locks, its cursor, and the renewals its rows lack.
// Recording goroutine only.
func (r *Recorder) loadSource(ctx context.Context, source string) error {
	states, cursors, renewals, err := r.journal.RestoreSource(ctx, source)
	if err != nil {
		return fmt.Errorf("restore source %s: %w", source, err)
	}
	r.trackMu.Lock()
	r.tracker.RestoreSource(source, states)
	r.writeOnly.forget(source)
	for _, st := range states {
		r.writeOnly.note(st)
	}
	var replayed []Renewal
	for _, e := range renewals {
		if rn, ok := r.tracker.ReplayRenewal(e); ok {
			replayed = append(replayed, rn)
		}
	}
	r.trackMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsaved.forget(source)
	for _, rn := range replayed {
		r.unsaved.put(rn, false) // synced with the next round: a takeover's rows are read by every replica
	}
	delete(r.cursors, source)
	for _, c := range cursors {
		r.cursors[c.Source] = c
	}
	return nil
}

// handOver writes, under its token, what the recorder holds of source that
// its rows lack (its renewals, and its cursor again), before it gives the
// source up with WithOwnership: after a clean handover the next owner has
// nothing to replay. A deposed replica's last write is refused by the
// fence, and shows as the stale write it is (WithOwnLocks). Recording
// goroutine only.
func (r *Recorder) handOver(source string) {
	token, ok := r.fences[source]
	if !r.owning || !ok {
		return
	}
	b := Batch{Fences: []Fence{{Source: source, Token: token}}, Synced: true, SyncSources: []string{source}}
	r.mu.Lock()
	for k := range r.unsaved {
		if k.Source == source {
			rn, _ := r.unsaved.get(k)
			b.Renewed = append(b.Renewed, rn)
		}
	}
	if c, ok := r.cursors[source]; ok {
		b.Cursors = []Cursor{c}
	}
	r.mu.Unlock()
	err := r.journal.Apply(context.Background(), b)
	stale, refused := staleFence(err)
	switch {
	case refused:
		fr := FenceRefusal{Source: source, Token: stale.Token, Highest: stale.Highest, At: r.now(), Renewals: len(b.Renewed)}
		r.log.Warn("a newer owner holds the source: the last write of its rows was refused",
			"source", source, "token", fr.Token, "highest", fr.Highest, "renewals", fr.Renewals)
		if r.onFenceRefused != nil {
			r.onFenceRefused(fr)
		}
		r.logRefusal(fr)
	case err != nil:
		r.log.Error("write a source's rows before giving it up: the next owner replays its renewals", "source", source, "err", err)
	}
}

// disown forgets source and refuses its requests with why from now on;
// recording goroutine only. It returns how many of the source's renewals
// not yet in its rows it forgot.
func (r *Recorder) disown(source string, why error) int {
	delete(r.fences, source)
	r.disowned[source] = why
	r.trackMu.Lock()
	r.tracker.Forget(source)
	r.writeOnly.forget(source)
	r.trackMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cursors, source)
	r.roundSources = slices.DeleteFunc(r.roundSources, func(s string) bool { return s == source })
	return r.unsaved.forget(source)
}

// fencesOf returns the fences of the sources whose rows b holds, in source
// order: two replicas' transactions then take the store's fence rows in
// one order, and cannot deadlock on them.
func (r *Recorder) fencesOf(b *Batch) []Fence {
	if len(r.fences) == 0 {
		return nil
	}
	var fences []Fence
	last := ""
	add := func(source string) {
		if source == last {
			return // rows come in runs of one source
		}
		last = source
		token, ok := r.fences[source]
		if !ok || slices.ContainsFunc(fences, func(f Fence) bool { return f.Source == source }) {
			return
		}
		fences = append(fences, Fence{Source: source, Token: token})
	}
	for i := range b.Locks {
		add(b.Locks[i].Lock.Source)
	}
	for i := range b.Tenures {
		add(b.Tenures[i].Lock.Source)
	}
	for i := range b.Events {
		add(b.Events[i].Lock.Source)
	}
	for i := range b.Findings {
		add(b.Findings[i].Lock.Source)
	}
	for i := range b.Renewed {
		add(b.Renewed[i].Lock.Source)
	}
	for i := range b.Cursors {
		add(b.Cursors[i].Source)
	}
	slices.SortFunc(fences, func(a, b Fence) int { return cmp.Compare(a.Source, b.Source) })
	return fences
}

// sources returns the sources the request names.
func (req *request) sources() []string {
	var out []string
	if req.input != nil {
		out = append(out, req.input.Source)
	}
	for _, w := range req.writes {
		if !slices.Contains(out, w.Source) {
			out = append(out, w.Source)
		}
	}
	for _, b := range req.beliefs {
		if !slices.Contains(out, b.Source) {
			out = append(out, b.Source)
		}
	}
	return out
}

// touches reports whether the request names source.
func (req *request) touches(source string) bool {
	if req.input != nil && req.input.Source == source {
		return true
	}
	return slices.ContainsFunc(req.writes, func(w WriteReport) bool { return w.Source == source }) ||
		slices.ContainsFunc(req.beliefs, func(b Belief) bool { return b.Source == source })
}

// disownedBy returns the refusal of a request that names a source this
// recorder has given up, nil if it names none.
func (r *Recorder) disownedBy(req *request) error {
	if r.owning {
		for _, source := range req.sources() {
			if _, ok := r.fences[source]; !ok {
				return cmp.Or(r.disowned[source], notOwned(source))
			}
		}
		return nil
	}
	if len(r.disowned) == 0 {
		return nil
	}
	for source, why := range r.disowned {
		if req.touches(source) {
			return why
		}
	}
	return nil
}

// fenceRefused handles the store's refusal of b, the group's batch, for
// stale's source: the tracker takes back every step of the group, the
// source is given up, its requests get the refusal, and the rest of the
// group commits again without them. Recording goroutine only.
func (r *Recorder) fenceRefused(group []*request, b Batch, err error, stale *StaleFence, refused []error, tick bool) {
	fr := FenceRefusal{Source: stale.Source, Token: stale.Token, Highest: stale.Highest, At: r.now()}
	for i := range b.Events {
		if b.Events[i].Lock.Source == stale.Source {
			fr.Events++
		}
	}
	r.renewedNow = nil
	fr.Renewals = r.disown(stale.Source, err)
	// The other sources' steps are taken back too, and taken again below:
	// some requests of the group are no longer in it.
	r.reload(context.Background())
	var rest, lost []*request
	for i, req := range group {
		switch {
		case refused != nil && refused[i] != nil:
			req.done <- refused[i]
		case req.touches(stale.Source):
			if req.input != nil {
				fr.Inputs++
			}
			fr.Writes += len(req.writes)
			lost = append(lost, req)
		default:
			rest = append(rest, req)
		}
	}
	r.log.Warn("a newer owner holds the source: its rows were refused and it is no longer recorded here",
		"source", fr.Source, "token", fr.Token, "highest", fr.Highest, "inputs", fr.Inputs, "writes", fr.Writes, "events", fr.Events)
	// Before the source's requests are answered: its collector is told to
	// stop before it hears of the refusal.
	if r.onFenceRefused != nil {
		r.onFenceRefused(fr)
	}
	for _, req := range lost {
		req.done <- err
	}
	r.commit(rest, tick)
	r.logRefusal(fr)
}

// logRefusal keeps fr in the store for the owner of leasewatch's own source
// to record (WithOwnLocks). Recording goroutine only.
func (r *Recorder) logRefusal(fr FenceRefusal) {
	if r.own.Source == "" {
		return
	}
	b := Batch{Refusals: []LoggedRefusal{{FenceRefusal: fr, Replica: r.own.Replica}}}
	if err := r.journal.Apply(context.Background(), b); err != nil {
		r.log.Error("log the fence refusal for leasewatch's own source: it will not show as a rejected write",
			"source", fr.Source, "token", fr.Token, "err", err)
	}
}

// recordRefusals returns the steps that record the logged fence refusals
// as rejected writes, when this replica owns leasewatch's own source and
// has not looked for refusalsEvery. Recording goroutine only.
func (r *Recorder) recordRefusals(ctx context.Context) Batch {
	if _, owned := r.fences[r.own.Source]; r.own.Source == "" || !owned || r.now().Sub(r.lastRefusals) < refusalsEvery {
		return Batch{}
	}
	r.lastRefusals = r.now()
	logged, err := r.journal.Refusals(ctx, maxRefusals)
	if err != nil {
		r.log.Error("read the fence refusals to record", "err", err)
		return Batch{}
	}
	var b Batch
	r.trackMu.Lock()
	defer r.trackMu.Unlock()
	for _, f := range logged {
		w := WriteReport{Source: r.own.Source, Lock: r.own.Lock(f.Source), Resource: "store", Token: Int64(f.Token),
			Outcome: WriteRejected, HighestToken: Int64(f.Highest), Holder: f.Replica, At: f.At}
		if err := r.writeOnly.admit([]WriteReport{w}, r.tracks); err == nil {
			step := r.tracker.ReportWrite(w)
			r.writeOnly.update(step)
			b.Append(r.hold(step))
		}
		b.RefusalsRecorded = append(b.RefusalsRecorded, f.ID)
	}
	return b
}

// staleFence returns the refusal err explains, if it is one.
func staleFence(err error) (*StaleFence, bool) {
	var sf *StaleFence
	return sf, errors.As(err, &sf)
}
