package runcodec

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The renewal log: renewals written without a row each. The journal
// writes the renewals of one batch that a run can hold as one log row per
// bucket of locks (Bucket) and run window. A log row, format version 1,
// is its renewals' lock groups, each a run (format version 1, above) of
// one lock's renewals of one tenure and detail:
//
//	version     byte, 1
//	a0          varint, the row's first observed time in ms
//	groups      until the data ends, in lock id order, each:
//	  lock      uvarint, the lock's id
//	  seq       uvarint, the tenure
//	  ttl       uvarint, the first renewal's lease in ms
//	  detail    uvarint length, then the JSON of the detail every renewal
//	            of the group has beyond margin and backend time
//	  n         uvarint, how many renewals the group holds
//	  first     uvarint, its first observed time in ms less a0
//	  run       uvarint length, then the renewals as a run (which keeps
//	            neither n, nor the first observed time, nor the first
//	            lease: the group's header does, as a run's row does)
//	  sub-ms    uvarint length, then per renewal a uvarint, its observed
//	            time's nanoseconds past the millisecond the run keeps
//	            (length 0: none has any): a logged renewal reads back
//	            exactly, as a row does, until it is sealed
//
// The row numbers its renewals from 0, group after group; a reader skips
// another lock's group by its lengths, undecoded.

// LogVersion is the log row format this package writes and reads.
const LogVersion = 1

// LogBuckets is how many buckets the log's rows are spread over: a lock's
// renewals are in the rows of its bucket, so a read of one lock decodes
// the group headers of 1/LogBuckets of the log.
const LogBuckets = 256

// Bucket is the bucket of lock id's renewals.
func Bucket(lockID int64) int64 { return lockID % LogBuckets }

// CommitBucket is the bucket of a commit row: the journal writes a
// commit's logged renewals, of every lock, as rows of this bucket (one per
// run window), which add one entry to the end of the index of a bucket's
// rows instead of one to each bucket's. Rebucketing folds them into rows
// of the locks' own buckets once every sync mark covers them.
const CommitBucket = -1

// A logged renewal's event id is its log row's id in the bits above
// indexBits and its place in the row below them, with bit 51 set: below
// every run renewal's id (bit 52), above every event row's. Sealing moves
// a logged renewal into a run, and so gives it its run's id: a renewal's
// id changes once. Reads order by observed time first, so only renewals
// observed in the same nanosecond can change places then.
const (
	logBase = int64(1) << 51
	// MaxLogRowID is the largest log row id LogID takes.
	MaxLogRowID = logBase>>indexBits - 1
)

// LogID is the event id of the renewal at index of log row row.
func LogID(row int64, index int) int64 { return logBase | row<<indexBits | int64(index) }

// SplitLogID returns the log row and index of an event id, and false when
// the id is not a logged renewal's.
func SplitLogID(id int64) (row int64, index int, ok bool) {
	if id < logBase || id >= idBase {
		return 0, 0, false
	}
	return (id - logBase) >> indexBits, int(id & (MaxRenewals - 1)), true
}

// Logged is one renewal as the journal logs it.
type Logged struct {
	LockID int64
	Seq    int64 // its tenure
	// Detail is its detail beyond margin_ratio and renewed_at (JSON, ""
	// for none), as a compact row keeps it.
	Detail string
	Renewal
}

// LogFits reports whether the log can keep l: a renewal a run keeps
// (Fits), of a lock and tenure.
func LogFits(l Logged) bool {
	return Fits(l.Renewal) && l.LockID > 0 && l.Seq > 0
}

// LogRow is one row of the log.
type LogRow struct {
	FirstAt, LastAt int64 // the earliest and latest observed time, unix ns
	Renewals        int
	Data            []byte
}

// EncodeLog returns logged, renewals that fit (LogFits) in the order they
// were stored, at most MaxRenewals, as one log row. Each lock's renewals
// keep their order; a row numbers them lock group by lock group, in lock
// id order.
func EncodeLog(logged []Logged) (LogRow, error) {
	if len(logged) == 0 || len(logged) > MaxRenewals {
		return LogRow{}, fmt.Errorf("a log row holds 1 to %d renewals, not %d", MaxRenewals, len(logged))
	}
	row := LogRow{FirstAt: logged[0].At, LastAt: logged[0].At, Renewals: len(logged)}
	order := make([]int, len(logged)) // indexes into logged, by lock and then as stored
	for i, l := range logged {
		if !LogFits(l) {
			return LogRow{}, fmt.Errorf("the log cannot keep renewal %d of lock %d tenure %d (position %q, lease %s)",
				i, l.LockID, l.Seq, l.Position, l.TTL)
		}
		row.FirstAt, row.LastAt = min(row.FirstAt, l.At), max(row.LastAt, l.At)
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(logged[a].LockID, logged[b].LockID), cmp.Compare(a, b)) })
	buf := make([]byte, 1, 24*len(logged))
	buf[0] = LogVersion
	a0 := floorMs(row.FirstAt)
	buf = binary.AppendVarint(buf, a0)
	var rs []Renewal
	var run []byte // each group's run, before its length is written
	for start := 0; start < len(order); {
		head := logged[order[start]]
		end := start + 1
		for end < len(order) && head.LockID == logged[order[end]].LockID && sameGroup(head, logged[order[end]]) {
			end++
		}
		rs = rs[:0]
		for _, i := range order[start:end] {
			rs = append(rs, logged[i].Renewal)
		}
		var err error
		if run, err = appendRun(run[:0], rs); err != nil {
			return LogRow{}, fmt.Errorf("log renewals of lock %d tenure %d: %w", head.LockID, head.Seq, err)
		}
		buf = appendGroup(buf, a0, head, run, rs)
		start = end
	}
	row.Data = buf
	return row, nil
}

// sameGroup reports whether b may join the group a started: one run.
func sameGroup(a, b Logged) bool {
	ka, _ := keyOf(a.Renewal)
	kb, _ := keyOf(b.Renewal)
	return a.Seq == b.Seq && a.Detail == b.Detail && ka == kb
}

// appendGroup appends the lock group of head's lock, tenure and detail
// whose renewals rs are run, in a row whose first observed ms is a0.
func appendGroup(buf []byte, a0 int64, head Logged, run []byte, rs []Renewal) []byte {
	buf = binary.AppendUvarint(buf, uint64(head.LockID))
	buf = binary.AppendUvarint(buf, uint64(head.Seq))
	buf = binary.AppendUvarint(buf, uint64(head.TTL.Milliseconds()))
	buf = binary.AppendUvarint(buf, uint64(len(head.Detail)))
	buf = append(buf, head.Detail...)
	buf = binary.AppendUvarint(buf, uint64(len(rs)))
	buf = binary.AppendUvarint(buf, uint64(floorMs(rs[0].At)-a0))
	buf = binary.AppendUvarint(buf, uint64(len(run)))
	buf = append(buf, run...)
	return appendSubMs(buf, rs)
}

// appendSubMs appends the observed times' nanoseconds past their
// millisecond, which a run drops: uvarint length, then a uvarint each;
// length 0 when every one is 0.
func appendSubMs(buf []byte, rs []Renewal) []byte {
	size := 0
	for _, r := range rs {
		size += uvarintLen(uint64(r.At - floorMs(r.At)*1e6))
	}
	if size == len(rs) && allWholeMs(rs) {
		return append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(size))
	for _, r := range rs {
		buf = binary.AppendUvarint(buf, uint64(r.At-floorMs(r.At)*1e6))
	}
	return buf
}

func allWholeMs(rs []Renewal) bool {
	for _, r := range rs {
		if r.At != floorMs(r.At)*1e6 {
			return false
		}
	}
	return true
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// LogGroup is one lock group of a log row: renewals of one lock, tenure
// and detail, as a run.
type LogGroup struct {
	LockID, Seq int64
	TTL         time.Duration // the first renewal's lease
	Detail      string
	Index       int    // the row's index of its first renewal
	Renewals    int    // how many it holds, from 1 to MaxRenewals
	FirstAt     int64  // the first renewal's observed time, unix ns, in ms
	Run         []byte // in this package's run format; shares the row's data
	subMs       []byte // the observed times' ns past their ms (appendSubMs)
}

var errLog = errors.New("log row")

// maxMs is the latest observed time, in ms, that unix ns hold.
const maxMs = math.MaxInt64 / int64(time.Millisecond)

// LogGroups returns the lock groups of a log row's data, only lock
// lockID's when it is not 0: the others are skipped by their lengths,
// their runs undecoded (a run's header says how many renewals it holds).
func LogGroups(data []byte, lockID int64) ([]LogGroup, error) {
	var groups []LogGroup
	err := EachLogGroup(data, lockID, func(g LogGroup) error {
		groups = append(groups, g)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return groups, nil
}

// EachLogGroup calls fn with each lock group of a log row's data that
// LogGroups returns, in order, without keeping them, until fn fails.
func EachLogGroup(data []byte, lockID int64, fn func(LogGroup) error) error {
	if len(data) == 0 || data[0] != LogVersion {
		return fmt.Errorf("%w: format not known", errLog)
	}
	h := header{buf: data[1:]}
	a0 := h.varint()
	if h.err != nil || a0 < floorMs(lowestAt) || a0 > maxMs {
		return fmt.Errorf("%w: first observed time damaged", errLog)
	}
	index := 0
	for len(h.buf) > 0 {
		lock, seq, ttl := h.uvarint(), h.uvarint(), h.uvarint()
		detail := h.bytes()
		n, first := h.uvarint(), h.uvarint()
		run := h.bytes()
		sub := h.bytes()
		if h.err != nil {
			return fmt.Errorf("%w: group at renewal %d: %w", errLog, index, h.err)
		}
		if lock == 0 || lock > 1<<62 || seq > 1<<62 || ttl > 1<<40 || n == 0 || n > uint64(MaxRenewals-index) ||
			first > uint64(maxMs-a0) {
			return fmt.Errorf("%w: group at renewal %d of lock %d is damaged", errLog, index, lock)
		}
		if lockID == 0 || int64(lock) == lockID {
			g := LogGroup{LockID: int64(lock), Seq: int64(seq), TTL: time.Duration(ttl) * time.Millisecond,
				Detail: string(detail), Index: index, Renewals: int(n), FirstAt: (a0 + int64(first)) * 1e6, Run: run, subMs: sub}
			if err := fn(g); err != nil {
				return err
			}
		}
		index += int(n)
	}
	return nil
}

// run is the group's renewals as a run of its lock and tenure, numbered
// id (unstored: the ids are the log's).
func (g LogGroup) run(id int64) Run {
	return Run{ID: id, LockID: g.LockID, Seq: g.Seq, FirstAt: g.FirstAt, Renewals: g.Renewals, TTL: g.TTL,
		Detail: g.Detail, Data: g.Run}
}

// bytes reads a uvarint length and as many bytes.
func (h *header) bytes() []byte {
	n := h.uvarint()
	if h.err != nil || n > uint64(len(h.buf)) {
		h.fail()
		return nil
	}
	b := h.buf[:n:n]
	h.buf = h.buf[n:]
	return b
}

// Decode returns the group's renewals.
func (g LogGroup) Decode() ([]Renewal, error) {
	rs, err := g.run(0).Decode()
	if err != nil {
		return nil, fmt.Errorf("%w: lock %d: %w", errLog, g.LockID, err)
	}
	return rs, g.eachSubMs(len(rs), func(i int, ns int64) { rs[i].At += ns })
}

// eachSubMs calls add with each of the group's n renewals' nanoseconds
// past the millisecond its run keeps, when any has some.
func (g LogGroup) eachSubMs(n int, add func(i int, ns int64)) error {
	if len(g.subMs) == 0 {
		return nil
	}
	h := header{buf: g.subMs}
	for i := range n {
		ns := h.uvarint()
		if h.err != nil || ns >= 1e6 {
			return fmt.Errorf("%w: lock %d: observed times damaged", errLog, g.LockID)
		}
		add(i, int64(ns))
	}
	if len(h.buf) > 0 {
		return fmt.Errorf("%w: lock %d: observed times damaged", errLog, g.LockID)
	}
	return nil
}

// AppendLogged appends the group's renewals, as the journal logged them,
// to dst.
func (g LogGroup) AppendLogged(dst []Logged) ([]Logged, error) {
	rs, err := g.Decode()
	if err != nil {
		return dst, err
	}
	for _, r := range rs {
		dst = append(dst, Logged{LockID: g.LockID, Seq: g.Seq, Detail: g.Detail, Renewal: r})
	}
	return dst, nil
}

// Staged returns the group's renewals, of log row row, as staged renewals
// for Pack, each with its logged id (LogID).
func (g LogGroup) Staged(row int64) ([]Staged, error) {
	rs, err := g.Decode()
	if err != nil {
		return nil, err
	}
	out := make([]Staged, len(rs))
	for i, r := range rs {
		out[i] = Staged{ID: LogID(row, g.Index+i), Seq: g.Seq, Detail: g.Detail, Renewal: r}
	}
	return out, nil
}

// Events returns the group's renewals, of log row row, as renew events of
// its lock with their logged ids and exact observed times, as Run.Events
// gives a run's.
func (g LogGroup) Events(row int64) ([]audit.Event, error) {
	if row <= 0 || row > MaxLogRowID {
		return nil, fmt.Errorf("%w: id %d out of range", errLog, row)
	}
	events, err := g.run(1).Events()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errLog, err)
	}
	for i := range events {
		events[i].ID = LogID(row, g.Index+i)
	}
	err = g.eachSubMs(len(events), func(i int, ns int64) { events[i].At = events[i].At.Add(time.Duration(ns)) })
	if err != nil {
		return nil, err
	}
	return events, nil
}
