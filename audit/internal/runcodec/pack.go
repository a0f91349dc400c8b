package runcodec

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// A renewal read from a run has an id of its own, above every row's and
// below 2^53, where JSON numbers stay exact: the run's id in the bits above
// indexBits and its place in the run below them. Runs are never rewritten,
// only deleted whole, so the id stays.
const (
	indexBits = 12
	idBase    = int64(1) << 52
	// MaxRunID is the largest run id ID takes.
	MaxRunID = idBase>>indexBits - 1
)

// ID is the event id of the renewal at index of run.
func ID(run int64, index int) int64 { return idBase | run<<indexBits | int64(index) }

// Split returns the run and index of an event id, and false when the id is
// a row's.
func Split(id int64) (run int64, index int, ok bool) {
	if id < idBase || id >= 2*idBase {
		return 0, 0, false
	}
	return (id - idBase) >> indexBits, int(id & (MaxRenewals - 1)), true
}

// Staged is a renewal stored as a row, waiting to be sealed into a run.
type Staged struct {
	ID  int64 // the row's event id
	Seq int64 // its tenure
	// Detail is the row's detail beyond margin_ratio and renewed_at, as
	// the row keeps it (JSON, "" for none).
	Detail string
	Renewal
}

// Run is one stored run.
type Run struct {
	ID       int64 // 0 until stored
	LockID   int64
	Seq      int64
	FirstAt  int64 // the first renewal's observed time, unix ns, as kept
	LastAt   int64 // the last's
	Renewals int
	TTL      time.Duration // the first renewal's lease
	// MinMargin is the least margin of its renewals, in permille; nil when
	// none has one.
	MinMargin *int64
	Detail    string // every renewal's detail beyond margin and backend time; "": none
	Data      []byte // the renewals, in this package's format
}

// Pack makes runs of one lock's staged renewals, given in the order they
// were observed: one run per tenure, window (Window) of observed time,
// detail and key, of at most MaxRenewals. sealed are the ids of the
// staged renewals the runs hold; the others (not Fits) stay rows.
func Pack(lockID int64, staged []Staged) (runs []Run, sealed []int64, err error) {
	var group []Staged
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		run, err := pack(lockID, group)
		if err != nil {
			return err
		}
		runs = append(runs, run)
		group = group[:0]
		return nil
	}
	for _, s := range staged {
		if !Fits(s.Renewal) {
			continue
		}
		if len(group) > 0 && (len(group) == MaxRenewals || !together(group[0], s)) {
			if err := flush(); err != nil {
				return nil, nil, err
			}
		}
		group = append(group, s)
		sealed = append(sealed, s.ID)
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	return runs, sealed, nil
}

// together reports whether b may join the run a started.
func together(a, b Staged) bool {
	ka, _ := keyOf(a.Renewal)
	kb, _ := keyOf(b.Renewal)
	return a.Seq == b.Seq && a.Detail == b.Detail && ka == kb &&
		window(a.At) == window(b.At)
}

// WindowOf is the index of the run window that holds at (unix ns).
func WindowOf(at int64) int64 { return window(at) }

func window(at int64) int64 {
	w := at / int64(Window)
	if at%int64(Window) < 0 {
		w--
	}
	return w
}

func pack(lockID int64, group []Staged) (Run, error) {
	rs := make([]Renewal, len(group))
	run := Run{LockID: lockID, Seq: group[0].Seq, Renewals: len(group), TTL: group[0].TTL, Detail: group[0].Detail}
	for i, s := range group {
		rs[i] = s.Renewal
		if s.Margin != NoMargin && (run.MinMargin == nil || s.Margin < *run.MinMargin) {
			run.MinMargin = audit.Int64(s.Margin)
		}
	}
	run.FirstAt, run.LastAt = floorMs(rs[0].At)*1e6, floorMs(rs[len(rs)-1].At)*1e6
	data, err := Encode(rs)
	if err != nil {
		return Run{}, fmt.Errorf("seal renewals of lock %d tenure %d: %w", lockID, run.Seq, err)
	}
	run.Data = data
	return run, nil
}

// Events returns the run's renewals as renew events of its lock, each with
// its id (ID), and the detail a row would give back. Holder and token are
// the tenure's, which the caller has.
func (r Run) Events() ([]audit.Event, error) {
	if r.ID <= 0 || r.ID > MaxRunID {
		return nil, fmt.Errorf("renewal run id %d out of range", r.ID)
	}
	rs, err := r.Decode()
	if err != nil {
		return nil, fmt.Errorf("run %d of lock %d: %w", r.ID, r.LockID, err)
	}
	events := make([]audit.Event, len(rs))
	for i, rn := range rs {
		d, err := r.detail(rn)
		if err != nil {
			return nil, err
		}
		events[i] = audit.Event{ID: ID(r.ID, i), LockID: r.LockID, Kind: audit.EventRenew, At: audit.TimeOf(rn.At),
			TTL: rn.TTL, Position: rn.Position, Seq: r.Seq, Detail: d}
	}
	return events, nil
}

var errDetail = errors.New("run detail")

// detail is one renewal's detail, as a row's columns rebuild it.
func (r Run) detail(rn Renewal) (map[string]any, error) {
	var d map[string]any
	if r.Detail != "" {
		var err error
		if d, err = rowcodec.DecodeDetail([]byte(r.Detail)); err != nil {
			return nil, fmt.Errorf("%w of run %d: %w", errDetail, r.ID, err)
		}
	}
	if rn.Margin != NoMargin {
		if err := (rowcodec.MarginDest{P: &d}).Scan(rn.Margin); err != nil {
			return nil, err
		}
	}
	if rn.RenewedAt != audit.NoNanos {
		if err := (rowcodec.RenewedAtDest{P: &d}).Scan(rn.RenewedAt); err != nil {
			return nil, err
		}
	}
	return d, nil
}
