package audit

import (
	"context"
	"slices"
	"time"
)

// Store is the read side of the audit log, used by the web server and reports.
// List methods return items in time order; where a filter has a Limit and more
// items match, they return the newest Limit items (still in time order).
type Store interface {
	// Locks returns the locks that match f, ordered by source then name.
	Locks(ctx context.Context, f LockFilter) ([]Lock, error)
	// Lock returns one lock. Returns ENOTFOUND if it does not exist.
	Lock(ctx context.Context, id int64) (Lock, error)
	// LockByKey returns one lock by source and name. Returns ENOTFOUND if it does not exist.
	LockByKey(ctx context.Context, key LockKey) (Lock, error)
	// Events returns the lock's events in time order within f's window.
	// Returns ENOTFOUND if the lock does not exist.
	Events(ctx context.Context, lockID int64, f EventFilter) ([]Event, error)
	// WriteEvents returns the lock's write events of one outcome
	// (write_accepted or write_rejected) within f's window, in time order,
	// with only what says what each write was: the cheap way to go through
	// thousands. f.Kind is ignored. Returns ENOTFOUND if the lock does not
	// exist.
	WriteEvents(ctx context.Context, lockID int64, outcome WriteOutcome, f EventFilter) ([]WriteEvent, error)
	// Tenures returns the lock's tenures that overlap f's window, in grant order.
	// Returns ENOTFOUND if the lock does not exist.
	Tenures(ctx context.Context, lockID int64, f TimeFilter) ([]Tenure, error)
	// TenuresByHolder returns the tenures of one holder identity across
	// every lock and source, granted within f's window, in grant order
	// (granted_at, then lock id and seq); if more than f.Limit match, the
	// newest f.Limit. Each has its LockID and Lock set. A holder no tenure
	// has matches nothing.
	TenuresByHolder(ctx context.Context, f HolderFilter) ([]Tenure, error)
	// Findings returns the findings that match f, in time order.
	Findings(ctx context.Context, f FindingFilter) ([]Finding, error)
	// FindingsByResource counts the lock's findings of one kind that start
	// within f's window, per resource, ordered by resource. f.Limit is not
	// used. It reads one index range and no finding: the way to count a
	// day of a busy lock's stale writes. Returns ENOTFOUND if the lock does
	// not exist.
	FindingsByResource(ctx context.Context, lockID int64, kind FindingKind, f TimeFilter) ([]ResourceFindings, error)
	// WriteMarks returns the lock's findings about one write (stale_write
	// and unfenced_write) that start within f's window, with only what
	// names that write, in time order; if more than f.Limit match, the
	// newest f.Limit. It reads an index range of each kind and no finding.
	// Returns ENOTFOUND if the lock does not exist.
	WriteMarks(ctx context.Context, lockID int64, f TimeFilter) ([]WriteMark, error)
	// LastEventAt returns, per source name, the time of its newest event.
	LastEventAt(ctx context.Context) (map[string]time.Time, error)

	// CountLocks returns how many locks match f, ignoring its sort, cursor and
	// offset. A positive f.Limit caps the count: a result equal to it means
	// at least that many.
	CountLocks(ctx context.Context, f LockFilter) (int, error)
	// LockCounts returns how many locks there are per source, class and state.
	LockCounts(ctx context.Context) ([]LockCount, error)
	// FindingCounts returns how many findings of locks of f.Class started
	// within f's window, per severity. f.Limit is not used.
	FindingCounts(ctx context.Context, f FindingCountFilter) (map[Severity]int, error)
	// EventTimes returns the times of the lock's events of one kind within f's
	// window, in time order; if more than f.Limit match, the newest f.Limit.
	// It is the cheap way to draw many renewals. Returns ENOTFOUND if the lock
	// does not exist.
	EventTimes(ctx context.Context, lockID int64, kind EventKind, f TimeFilter) ([]time.Time, error)
	// WriteCounts counts the lock's write events of one outcome within f's
	// window per equal stretch of it, without returning them: the way to
	// draw a window of millions of writes in memory that does not grow with
	// them. Returns EINVALID if f does not cut a window into bins, ENOTFOUND
	// if the lock does not exist.
	WriteCounts(ctx context.Context, lockID int64, outcome WriteOutcome, f BinFilter) (Histogram, error)
	// WriteTicks returns the counts per WriteTick the store keeps of the
	// lock's writes of one outcome, of the ticks that start within f's
	// window, in time order; ticks without a write are left out. f.Limit is
	// not used. It reads one row per tick and no write: a tick whose count
	// has not changed still holds the same writes, as far as a reader that
	// keeps them needs to know (writes are stored and pruned, never
	// changed). Writes before 1970 are in no tick. Returns ENOTFOUND if the
	// lock does not exist.
	WriteTicks(ctx context.Context, lockID int64, outcome WriteOutcome, f TimeFilter) ([]TickCount, error)
	// WriteStats returns, per resource that reported writes of the lock
	// within f's window, how many it accepted (and of those, how many
	// without a token) and rejected, and when it last reported, ordered by
	// resource. f.Limit is not used. Returns ENOTFOUND if the lock does not
	// exist.
	WriteStats(ctx context.Context, lockID int64, f TimeFilter) ([]ResourceWrites, error)
	// BlindWindows returns the intervals over which sources' collectors were
	// blind that overlap f's window, in time order; if more than f.Limit
	// match, the newest f.Limit.
	BlindWindows(ctx context.Context, f BlindFilter) ([]BlindWindow, error)
	// Cursors returns every source's stored resume cursor, by source name.
	Cursors(ctx context.Context) ([]Cursor, error)
	// Verdicts returns the kept verdicts (PutVerdicts) of the locks ids
	// names, by lock id; a lock not judged yet is missing.
	Verdicts(ctx context.Context, ids []int64) (map[int64]LockVerdict, error)
	// VerdictCounts returns how many locks of class (empty: every class)
	// have each kept verdict.
	VerdictCounts(ctx context.Context, class Class) (map[string]int, error)
}

// LockVerdict is a lock's safety verdict as the query layer's keeper last
// judged it (audit/verdict Keeper), kept so that lists, counts and metrics
// need no scan of every lock's history. Verdict is a verdict.Kind.
type LockVerdict struct {
	LockID   int64
	Verdict  string
	JudgedAt time.Time
}

// ResourceFindings counts one resource's findings of a kind in a window.
type ResourceFindings struct {
	Resource string
	N        int
	First    time.Time // the earliest finding's start
}

// WriteMark names the write a stale_write or unfenced_write finding is
// about: its resource, time and token (the finding's first).
type WriteMark struct {
	ID       int64 // the finding's
	Kind     FindingKind
	At       time.Time
	Resource string
	Token    *int64
}

// WriteMarkOf returns what names the write f is about, and false if f is
// not about one write.
func WriteMarkOf(f Finding) (WriteMark, bool) {
	if !slices.Contains(WriteFindingKinds, f.Kind) {
		return WriteMark{}, false
	}
	m := WriteMark{ID: f.ID, Kind: f.Kind, At: f.At, Resource: f.Resource}
	if len(f.Tokens) > 0 {
		m.Token = Int64(f.Tokens[0])
	}
	return m, true
}

// ResourceWrites is what one protected resource reported of a lock's writes
// in a window.
type ResourceWrites struct {
	Resource           string
	Accepted, Rejected int
	// Untokened counts the accepted writes that carried no fencing token:
	// the resource did not check one.
	Untokened int
	LastAt    time.Time // its newest report
}

// BinFilter cuts the window From..To (both ends set and inclusive) into Bins
// stretches of equal width. Limit, when positive, counts only the newest
// Limit events.
type BinFilter struct {
	From, To time.Time
	Bins     int
	Limit    int
	// Ticks lets the store count from the counts per WriteTick it keeps as
	// writes are stored, rather than from every write, when the stretches
	// are at least half a tick wide: it rounds their width to whole ticks
	// and starts the first at the tick that holds From. The Histogram may
	// then start up to a tick before From, end up to a tick past To, and
	// have from half to one and a half times Bins stretches (and one
	// more). It still counts only the writes from From to To, all of them,
	// whatever Limit says. Narrower stretches, and windows before 1970 or
	// within a tick of LatestTime, are counted from the writes, as without
	// it.
	Ticks bool
}

// WriteTick is how long a stretch of time the stores count a lock's writes
// of one outcome over as they store them (for BinFilter.Ticks): the
// migrations that keep the counts bin a write at at (at >= 0) into
// at - at % WriteTick.
const WriteTick = 10 * time.Second

// TickCount is how many writes of one outcome a lock has in the WriteTick
// that starts at Start.
type TickCount struct {
	Start time.Time
	N     int
}

// Histogram is how many events fell in each stretch of a BinFilter's window:
// Counts[i] those from From+i*Width, up to but not including the next
// stretch. Width is the window's span over the bins, rounded up to a whole
// nanosecond, so the last stretch may reach past To; it also holds To.
type Histogram struct {
	From   time.Time
	Width  time.Duration
	Counts []int
	// AtLeast says more events matched than the filter's Limit: Counts hold
	// the newest Limit, and the totals are lower bounds.
	AtLeast bool
}

// Total is how many events were counted.
func (h Histogram) Total() int {
	n := 0
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Bin returns where stretch i starts and where the next starts.
func (h Histogram) Bin(i int) (from, to time.Time) {
	return h.From.Add(time.Duration(i) * h.Width), h.From.Add(time.Duration(i+1) * h.Width)
}

// LockSort orders a locks list.
type LockSort string

// Lock orders. The zero value is SortName.
const (
	SortName    LockSort = "name"    // by source, then name
	SortChanged LockSort = "changed" // most recently changed first
	SortExpiry  LockSort = "expiry"  // least lease left first (expires_at ascending)
)

// Valid reports whether s is a known order ("" is SortName).
func (s LockSort) Valid() bool {
	return s == "" || s == SortName || s == SortChanged || s == SortExpiry
}

// LockCount is the number of locks of one source, class and state.
type LockCount struct {
	Source string
	Class  Class
	State  LockState
	N      int
}

// BlindFilter selects blind windows. Empty Source matches every source.
type BlindFilter struct {
	TimeFilter
	Source string
}

// BlindWindow is one interval over which a source's collector could not see
// its backend, and how many of its locks it covered.
type BlindWindow struct {
	Source   string
	From, To time.Time
	Reason   string
	Locks    int
}

// TimeFilter selects by time. Zero From/To leave that side open; Limit <= 0
// means the store's default.
type TimeFilter struct {
	From, To time.Time
	Limit    int
}

// LockFilter selects locks. Empty fields match everything; Name and Holder are
// exact matches, Q a case-insensitive substring of the name or holder.
//
// After and Before page through a sorted list by keyset: the id of the last
// (first) lock of the previous page; the store continues after (before) that
// lock's position in Sort's order. They are faster than Offset on deep pages.
type LockFilter struct {
	Source string
	Kind   SourceKind
	Name   string
	Holder string
	Q      string
	Class  Class
	State  LockState
	// ExpiringBy, with ExpiringAt, keeps held locks with less than this
	// fraction of their lease left at ExpiringAt (or already past expiry).
	ExpiringBy float64
	ExpiringAt time.Time
	// Verdict keeps the locks whose kept verdict (LockVerdict) is this one.
	Verdict string
	// ChangedFrom and ChangedTo keep the locks whose last change
	// (Lock.ChangedAt) is within them; a zero end is open.
	ChangedFrom, ChangedTo time.Time
	Sort                   LockSort
	After                  int64
	Before                 int64
	Limit                  int
	Offset                 int
}

// EventFilter selects a lock's events.
type EventFilter struct {
	TimeFilter
	Kind EventKind
	// Kinds, when Kind is empty, selects the events of any of these kinds:
	// one read for several kinds. Neither means every kind.
	Kinds []EventKind
	// Before, when not zero, keeps events strictly older than this position
	// in (at, id) order: keyset paging towards the past.
	Before EventCursor
}

// EventCursor is a position in a lock's (at, id) event order.
type EventCursor struct {
	At time.Time
	ID int64
}

// IsZero reports whether the cursor is unset.
func (c EventCursor) IsZero() bool { return c.ID == 0 && c.At.IsZero() }

// DefaultListLimit is how many events or findings a list call returns when
// its filter gives no Limit; MaxListLimit, the most it returns whatever the
// filter asks.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
)

// DefaultLockLimit is how many locks Locks returns when its filter gives no
// Limit; MaxLockLimit, the most it returns whatever the filter asks. A
// caller that pages through every lock may ask for MaxLockLimit at once.
const (
	DefaultLockLimit = 500
	MaxLockLimit     = 5000
)

// HolderFilter selects one holder's tenures by their grant time.
type HolderFilter struct {
	TimeFilter
	Holder string // exact
	// Before, when not zero, keeps tenures strictly older than this
	// position in (granted_at, lock id, seq) order: keyset paging towards
	// the past.
	Before TenureCursor
}

// TenureCursor is a position in the (granted_at, lock id, seq) order of
// tenures across locks.
type TenureCursor struct {
	GrantedAt time.Time
	LockID    int64
	Seq       int64
}

// IsZero reports whether the cursor is unset.
func (c TenureCursor) IsZero() bool { return c.LockID == 0 && c.Seq == 0 && c.GrantedAt.IsZero() }

// FindingFilter selects findings. LockID 0 means every lock; empty Class,
// every class.
type FindingFilter struct {
	TimeFilter
	LockID int64
	Source string
	Class  Class // the class of the finding's lock
	Kind   FindingKind
	// Kinds, when Kind is empty, selects the findings of any of these
	// kinds. Neither means every kind.
	Kinds    []FindingKind
	Severity Severity
	Resource string
	// Overlapping selects findings whose [at, until] interval overlaps the
	// window, instead of those that start within it.
	Overlapping bool
	// Before, when not zero, keeps findings strictly older than this position
	// in (at, id) order: keyset paging towards the past.
	Before EventCursor
}

// FindingCountFilter selects the findings FindingCounts counts: those that
// start within the window, of locks of Class (empty: every class).
type FindingCountFilter struct {
	TimeFilter
	Class Class
}

// Batch is everything one group commit writes: the tracker's changes from one
// or more inputs and the cursors that cover them. A Journal applies a batch in
// one transaction, so a crash keeps all of it or none of it.
//
// Renewals are most of what a busy backend does, and they change only a few
// columns of a lock and its held tenure, which the renew event itself
// records. So a renewal-only change travels apart, in Renewed, and the
// Recorder writes those rows only now and then (Synced), replaying the renew
// events stored since the last sync after a crash (Journal.Unsynced).
type Batch struct {
	Locks   []TrackState // insert or replace by lock key: the lock row and the tracker's memory of it
	Tenures []Tenure     // insert or replace by (lock key, Seq)
	// Resources are the resource states the batch changed: insert or
	// replace by (lock key, Resource), after Locks. A lock's other
	// resources keep their rows, so a write report costs one row however
	// many resources the lock has.
	Resources []ResourceRow
	Events    []Event
	Findings  []Finding
	Cursors   []Cursor
	// Renewed are locks changed by renewals only, each at least as new as any
	// entry of the same lock in Locks: after writing Locks and Tenures, the
	// journal updates the renewal columns of the lock and its held tenure,
	// and nothing else.
	Renewed []Renewal
	// Synced says that with this batch every lock and tenure row holds every
	// event stored so far: Unsynced starts after it.
	Synced bool
	// A sync of many locks is spread over several batches. SyncMark starts
	// one: the journal notes the newest event stored with this batch. A
	// later batch's SyncedToMark says every row now holds every event up to
	// that note, and Unsynced starts after it. (A batch may carry both.)
	SyncMark, SyncedToMark bool
	// SyncSources, when replicas share the store, are the sources whose
	// own sync marks Synced and SyncedToMark move: a replica syncs the
	// rows of the sources it owns, and claims nothing of the others'. None:
	// the claims are the whole store's (one recorder writes every source).
	SyncSources []string
	// Refusals are fence refusals to keep until they are recorded (see
	// LoggedRefusal): a deposed replica writes them in a batch of their
	// own, which no fence checks. RefusalsRecorded are the ids of logged
	// refusals this batch records, as rejected writes on leasewatch's own
	// locks: the journal deletes them with it, so each is recorded once.
	Refusals         []LoggedRefusal
	RefusalsRecorded []int64
	// Fences are the owners' tokens of the sources whose rows the batch
	// carries, when replicas share the store: the journal checks each, in
	// order, in the batch's transaction, and stores none of the batch if one
	// is older than its source's fence (see Fence). A batch of fences alone
	// moves them. No fences: nothing is checked.
	Fences []Fence
}

// Empty reports whether the batch writes nothing.
func (b *Batch) Empty() bool {
	return len(b.Locks) == 0 && len(b.Tenures) == 0 && len(b.Resources) == 0 && len(b.Events) == 0 &&
		len(b.Findings) == 0 && len(b.Cursors) == 0 && len(b.Renewed) == 0 && !b.Synced && !b.SyncMark && !b.SyncedToMark && len(b.Fences) == 0 &&
		len(b.Refusals) == 0 && len(b.RefusalsRecorded) == 0
}

// Append adds o's contents to b, a later step's. A renewal of b.Renewed that
// o writes in full is brought up to o's state, so Renewed stays the newest.
func (b *Batch) Append(o Batch) {
	if len(b.Renewed) > 0 && len(o.Locks) > 0 {
		full := make(map[LockKey]*TrackState, len(o.Locks))
		for i := range o.Locks {
			full[o.Locks[i].Lock.Key()] = &o.Locks[i]
		}
		kept := b.Renewed[:0]
		for _, r := range b.Renewed {
			if st, ok := full[r.Lock]; ok {
				var held bool
				if r, held = st.renewal(); !held {
					continue // its tenure ended, and o wrote it in full
				}
			}
			kept = append(kept, r)
		}
		b.Renewed = kept
	}
	b.Locks = append(b.Locks, o.Locks...)
	b.Tenures = append(b.Tenures, o.Tenures...)
	b.Resources = append(b.Resources, o.Resources...)
	b.Events = append(b.Events, o.Events...)
	b.Findings = append(b.Findings, o.Findings...)
	b.Cursors = append(b.Cursors, o.Cursors...)
	b.Renewed = append(b.Renewed, o.Renewed...)
	b.Fences = append(b.Fences, o.Fences...)
	b.Refusals = append(b.Refusals, o.Refusals...)
	b.RefusalsRecorded = append(b.RefusalsRecorded, o.RefusalsRecorded...)
	for _, src := range o.SyncSources {
		if !slices.Contains(b.SyncSources, src) {
			b.SyncSources = append(b.SyncSources, src)
		}
	}
	b.Synced = b.Synced || o.Synced
	b.SyncMark = b.SyncMark || o.SyncMark
	b.SyncedToMark = b.SyncedToMark || o.SyncedToMark
}

// Renewal is all a renewal changes of a lock (RenewedAt, ExpiresAt,
// LeaseDuration) and of its held tenure (Renewals, LastRenewedAt, ExpiresAt,
// LeaseDuration).
type Renewal struct {
	Lock          LockKey
	Seq           int64 // the held tenure
	Renewals      int64
	RenewedAt     time.Time
	ExpiresAt     time.Time // zero when unknown
	LeaseDuration time.Duration
}

// renewalOf returns the renewal columns of a held tenure.
func renewalOf(t Tenure) Renewal {
	return Renewal{Lock: t.Lock, Seq: t.Seq, Renewals: t.Renewals, RenewedAt: t.LastRenewedAt, ExpiresAt: t.ExpiresAt, LeaseDuration: t.LeaseDuration}
}

// renewal returns the renewal columns of a held lock, for Batch.Renewed. It
// is false when the lock is not held.
func (st *TrackState) renewal() (Renewal, bool) {
	if n := len(st.Recent); n > 0 && st.Recent[n-1].Held() {
		return renewalOf(st.Recent[n-1]), true
	}
	return Renewal{}, false
}

// Cursor is a collector's resume position in its backend (etcd revision,
// Kubernetes resourceVersion) and the collector-clock time it was reached.
type Cursor struct {
	Source   string
	Position string
	At       time.Time
}

// Database is every part of a store the service relies on: the read side,
// the journal the recorder writes through, the pruner of retention and the
// sealer of renewals, and the database size the metrics report. audit/sqlite and audit/postgres each
// implement it; the contract suite (audit/storetest) checks it.
type Database interface {
	Store
	Journal
	Pruner
	Sealer
	// PutVerdicts keeps each lock's verdict, replacing the one kept
	// before (audit/verdict Keeper). A lock that does not exist is skipped.
	PutVerdicts(ctx context.Context, verdicts []LockVerdict) error
	// Size returns the bytes the database takes.
	Size(ctx context.Context) (int64, error)
	Close() error
}

// Journal is the write side of the audit log, owned by the Recorder.
type Journal interface {
	// Apply writes b in one transaction. Later entries for the same lock,
	// tenure or cursor replace earlier ones. It moves each of b.Fences up
	// to its token, and if one is older than its source's fence, writes
	// nothing and returns EFENCED (an error of FencedError's, which a
	// *StaleFence explains).
	Apply(ctx context.Context, b Batch) error
	// Restore returns the tracker's saved memory of every lock and every
	// source's cursor, as of the last applied batch: the lock rows as they
	// were written, which Unsynced's renewals may have overtaken.
	Restore(ctx context.Context) ([]TrackState, []Cursor, error)
	// Unsynced returns the renew events stored after the last Synced batch,
	// in the order they were stored, for Tracker.ReplayRenewal.
	Unsynced(ctx context.Context) ([]Event, error)
	// Refusals returns the logged fence refusals not yet recorded, oldest
	// first, at most limit of them.
	Refusals(ctx context.Context, limit int) ([]LoggedRefusal, error)
	// RestoreSource is Restore and Unsynced of one source, in one
	// snapshot: a replica that takes the source over loads it. Its
	// renewals are those after the source's own sync mark (SyncSources).
	RestoreSource(ctx context.Context, source string) ([]TrackState, []Cursor, []Event, error)
	// StoredWrites returns the write events stored with any of the request
	// ids, under any lock and resource, each with its Lock set: the
	// recorder tells a retry from a conflicting reuse of an id by them.
	StoredWrites(ctx context.Context, ids []string) ([]Event, error)
}

// TrackState is everything the tracker remembers about one lock. The store
// persists it with every change to the lock (renewals as Batch describes, and
// resources one row each, as Batch.Resources), so a restart resumes exactly
// where the last committed batch left off.
type TrackState struct {
	Lock             Lock     `json:"-"`
	Recent           []Tenure `json:"-"` // newest last, consecutive by Seq up to NextSeq; the last is current while held
	NextSeq          int64    `json:"next_seq"`
	LastGrantToken   *int64   `json:"last_grant_token,omitempty"`
	ExpireByClock    bool     `json:"expire_by_clock,omitempty"`
	SequentialTokens bool     `json:"sequential_tokens,omitempty"`
	TokenPerTenure   bool     `json:"token_per_tenure,omitempty"`
	UnfencedReported bool     `json:"unfenced_reported,omitempty"`
	// Resources are kept in rows of their own (Batch.Resources), not in the
	// JSON of the rest; Restore fills them in.
	Resources map[string]*ResourceState `json:"-"`
	// Leadership health (health.go): when the last flapping finding was
	// raised; when the lock, free now, becomes leaderless if nobody takes
	// it; the tenures (by Seq) that tight_renewal and clock_skew were
	// raised for, so that each is raised once.
	FlappingAt    time.Time `json:"flapping_at,omitzero"`
	LeaderlessDue time.Time `json:"leaderless_due,omitzero"`
	TightSeq      int64     `json:"tight_seq,omitempty"`
	SkewSeq       int64     `json:"skew_seq,omitempty"`
	// Zombies are the zombie tenures a zombie_holder finding was raised
	// for (belief.go), so that each is raised once, with how long after
	// its end its last zombie_belief event was.
	Zombies []ZombieMark `json:"zombies,omitempty"`
}

// ZombieMark is one zombie tenure of a lock, as the tracker remembers it:
// by its Seq while the tenure is remembered, else by the seq of the grant
// that showed it a zombie (By), for every forgotten tenure older than it.
type ZombieMark struct {
	Seq     int64 `json:"seq,omitempty"`
	By      int64 `json:"by,omitempty"`
	AfterMS int64 `json:"after_ms"` // of its last zombie_belief event
}

// ResourceRow is one protected resource's state under a lock, as a Batch
// writes it.
type ResourceRow struct {
	Lock     LockKey
	Resource string
	State    ResourceState
}

// ResourceState is what the tracker knows of one protected resource's view of
// a lock.
type ResourceState struct {
	Highest *int64 `json:"highest,omitempty"` // highest token the resource accepted
	// Pending are grants the resource has not yet seen a write for: each opens
	// an exposure window until the first write with a token >= it.
	Pending []PendingGrant `json:"pending,omitempty"`
	// Accepted are the latest writes the resource accepted after every grant
	// the tracker knew of: a grant the collector reports later, made before
	// one of them with a higher token, makes it an unfenced write. Not
	// persisted: a restart forgets them, and only that late judgement.
	Accepted []AcceptedWrite `json:"-"`
}

// AcceptedWrite is a write a resource accepted, kept until a grant after it
// is known.
type AcceptedWrite struct {
	Token  int64
	At     time.Time
	Holder string
}

// PendingGrant is a grant whose exposure window at a resource is still open.
type PendingGrant struct {
	Token     int64     `json:"token"`
	GrantedAt time.Time `json:"granted_at"`
	Holder    string    `json:"holder"`
}
