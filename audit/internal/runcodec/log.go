package runcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The renewal log: renewals written without a row each. The journal
// writes the renewals of one batch that a run can hold as one log row per
// bucket of locks (Bucket) and run window: its data is the renewals'
// lock groups in the format below, each group's renewals a run.

// LogVersion is the log row format this package writes and reads.
const LogVersion = 1

// LogBuckets is how many buckets the log's rows are spread over: a lock's
// renewals are in the rows of its bucket, so a read of one lock decodes
// the group headers of 1/LogBuckets of the log.
const LogBuckets = 256

// Bucket is the bucket of lock id's renewals.
func Bucket(lockID int64) int64 { return lockID % LogBuckets }

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
	TTL    time.Duration
	// Detail is its detail beyond margin_ratio and renewed_at (JSON, ""
	// for none), as a compact row keeps it.
	Detail string
	Renewal
}

// LogFits reports whether the log can keep l: a renewal a run keeps
// (Fits), of a lock and tenure, with a lease of whole milliseconds.
func LogFits(l Logged) bool {
	return Fits(l.Renewal) && l.LockID > 0 && l.Seq > 0 && l.TTL >= 0 && l.TTL%time.Millisecond == 0
}

// LogRow is one row of the log.
type LogRow struct {
	FirstAt, LastAt int64 // the earliest and latest observed time, unix ns, as kept
	Renewals        int
	Data            []byte
}

// EncodeLog returns logged, renewals that fit (LogFits) in the order they
// were stored, at most MaxRenewals, as one log row. Each lock's renewals
// keep their order; a row numbers them lock group by lock group, in the
// order each lock first appears.
func EncodeLog(logged []Logged) (LogRow, error) {
	if len(logged) == 0 || len(logged) > MaxRenewals {
		return LogRow{}, fmt.Errorf("a log row holds 1 to %d renewals, not %d", MaxRenewals, len(logged))
	}
	row := LogRow{FirstAt: floorMs(logged[0].At) * 1e6, Renewals: len(logged)}
	row.LastAt = row.FirstAt
	order := make([]int64, 0, len(logged))       // locks in the order they first appear
	byLock := make(map[int64][]int, len(logged)) // indexes into logged
	for i, l := range logged {
		if !LogFits(l) {
			return LogRow{}, fmt.Errorf("the log cannot keep renewal %d of lock %d tenure %d (position %q, lease %s)",
				i, l.LockID, l.Seq, l.Position, l.TTL)
		}
		at := floorMs(l.At) * 1e6
		row.FirstAt, row.LastAt = min(row.FirstAt, at), max(row.LastAt, at)
		if _, ok := byLock[l.LockID]; !ok {
			order = append(order, l.LockID)
		}
		byLock[l.LockID] = append(byLock[l.LockID], i)
	}
	buf := make([]byte, 1, 16*len(logged))
	buf[0] = LogVersion
	rs := make([]Renewal, 0, len(logged))
	for _, lock := range order {
		idx := byLock[lock]
		for start := 0; start < len(idx); {
			end := start + 1
			for end < len(idx) && sameGroup(logged[idx[start]], logged[idx[end]]) {
				end++
			}
			rs = rs[:0]
			for _, i := range idx[start:end] {
				rs = append(rs, logged[i].Renewal)
			}
			var err error
			if buf, err = appendGroup(buf, logged[idx[start]], rs); err != nil {
				return LogRow{}, err
			}
			start = end
		}
	}
	row.Data = buf
	return row, nil
}

// sameGroup reports whether b may join the group a started: one run.
func sameGroup(a, b Logged) bool {
	ka, _ := keyOf(a.Renewal)
	kb, _ := keyOf(b.Renewal)
	return a.Seq == b.Seq && a.TTL == b.TTL && a.Detail == b.Detail && ka == kb
}

func appendGroup(buf []byte, head Logged, rs []Renewal) ([]byte, error) {
	run, err := Encode(head.TTL, rs)
	if err != nil {
		return nil, fmt.Errorf("log renewals of lock %d tenure %d: %w", head.LockID, head.Seq, err)
	}
	buf = binary.AppendUvarint(buf, uint64(head.LockID))
	buf = binary.AppendUvarint(buf, uint64(head.Seq))
	buf = binary.AppendUvarint(buf, uint64(head.TTL.Milliseconds()))
	buf = binary.AppendUvarint(buf, uint64(len(head.Detail)))
	buf = append(buf, head.Detail...)
	buf = binary.AppendUvarint(buf, uint64(len(run)))
	return append(buf, run...), nil
}

// LogGroup is one lock group of a log row: renewals of one lock, tenure,
// lease and detail, as a run.
type LogGroup struct {
	LockID, Seq int64
	TTL         time.Duration
	Detail      string
	Index       int // the row's index of its first renewal
	Renewals    int
	Run         []byte // in this package's run format; shares the row's data
}

var errLog = errors.New("log row")

// LogGroups returns the lock groups of a log row's data, only lock
// lockID's when it is not 0: the others are skipped by their lengths,
// their runs undecoded (a run's header says how many renewals it holds).
func LogGroups(data []byte, lockID int64) ([]LogGroup, error) {
	if len(data) == 0 || data[0] != LogVersion {
		return nil, fmt.Errorf("%w: format not known", errLog)
	}
	var groups []LogGroup
	h := header{buf: data[1:]}
	index := 0
	for len(h.buf) > 0 {
		lock, seq, ttl := h.uvarint(), h.uvarint(), h.uvarint()
		detail := h.bytes()
		run := h.bytes()
		if h.err != nil {
			return nil, fmt.Errorf("%w: group at renewal %d: %w", errLog, index, h.err)
		}
		n, err := runLength(run)
		if err != nil || lock == 0 || lock > 1<<62 || seq > 1<<62 || ttl > 1<<40 || index+n > MaxRenewals {
			return nil, fmt.Errorf("%w: group at renewal %d of lock %d is damaged", errLog, index, lock)
		}
		if lockID == 0 || int64(lock) == lockID {
			groups = append(groups, LogGroup{LockID: int64(lock), Seq: int64(seq), TTL: time.Duration(ttl) * time.Millisecond,
				Detail: string(detail), Index: index, Renewals: n, Run: run})
		}
		index += n
	}
	return groups, nil
}

// runLength reads how many renewals a run holds from its header.
func runLength(run []byte) (int, error) {
	if len(run) < 3 || run[0] != Version {
		return 0, errVersion
	}
	n, k := binary.Uvarint(run[2:])
	if k <= 0 || n == 0 || n > MaxRenewals {
		return 0, errShort
	}
	return int(n), nil
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
	rs, err := Decode(g.Run, g.TTL)
	if err != nil {
		return nil, fmt.Errorf("%w: lock %d: %w", errLog, g.LockID, err)
	}
	if len(rs) != g.Renewals {
		return nil, fmt.Errorf("%w: lock %d: run holds %d renewals, its header says %d", errLog, g.LockID, len(rs), g.Renewals)
	}
	return rs, nil
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
		out[i] = Staged{ID: LogID(row, g.Index+i), Seq: g.Seq, TTL: g.TTL, Detail: g.Detail, Renewal: r}
	}
	return out, nil
}

// Events returns the group's renewals, of log row row, as renew events of
// its lock with their logged ids, as Run.Events does.
func (g LogGroup) Events(row int64) ([]audit.Event, error) {
	if row <= 0 || row > MaxLogRowID {
		return nil, fmt.Errorf("%w: id %d out of range", errLog, row)
	}
	rs, err := g.Decode()
	if err != nil {
		return nil, err
	}
	return renewEvents(g.LockID, g.Seq, g.TTL, g.Detail, rs, func(i int) int64 { return LogID(row, g.Index+i) })
}
