// Package runcodec is the format of a renewal run: the renewals of one
// tenure over one window, kept as a few bits each instead of a row each
// (docs/design/renewal-runs.md). Both stores keep runs in this format;
// the SQL that keeps them stays with each store.
//
// A run of n renewals, format version 1, is:
//
//	version     byte, 1
//	flags       byte: bit 0, every renewal has a backend time (RenewedAt);
//	            bits 1-2, the positions' form (0 none, 1 decimal, 2 0x-hex);
//	            bits 3-4, with backend times, the unit they are kept in (0
//	            ns, 1 µs, 2 ms, 3 s, the coarsest that holds every one);
//	            bit 5, the lease changes within the run (a ttl column)
//	q0          with backend times: varint, the first time in that unit
//	            less the first observed time (its ms) in that unit,
//	            floored, modulo 2^64
//	p0          with positions: varint, the first position
//	m0          varint, the first renewal's margin code (see margin)
//	columns     per column that the run has, in the order below: varint
//	            base, uvarint size (see column)
//	bits        the columns' values, column after column
//
// n, the first observed time, in ms, and the first renewal's lease are not
// in it: the run's row keeps them (Run.Renewals, Run.FirstAt, Run.TTL), and
// Run.Decode takes them from there.
//
// The columns are residuals, each what a prediction from the renewals
// before it missed by:
//
//	interval   with backend times, renewals 1..n-1: the time since the
//	           renewal before, in the unit. A heartbeat every 10 s with
//	           4 % jitter, in µs, is 18.7 bits.
//	lag        renewals 1..n-1: with backend times, the observed time less
//	           the backend time, in ms (a few bits); without, the observed
//	           time since the renewal before, in ms.
//	margin     renewals 1..n-1: 0 when it has none, else 1 plus the
//	           zigzag of its margin less the margin its time and the one
//	           before give (no bits when every margin is what the times
//	           say). The first renewal's, against 0, is m0.
//	position   with positions, renewals 1..n-1: the change since the one
//	           before.
//	ttl        where the lease changes, renewals 1..n-1: the lease less the
//	           first renewal's, in ms (a Redis lock's lease, read back as its
//	           PTTL, is its TTL or a millisecond more: a bit a renewal). The
//	           margin a renewal's times give is reckoned with the lease
//	           before it.
//
// Observed times are kept to the millisecond (floored); everything else
// exactly.
package runcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Version is the run format this package writes and reads.
const Version = 1

// MaxRenewals is the most renewals one run holds: a renewal's place in
// its run takes the low 12 bits of its id (ID).
const MaxRenewals = 1 << indexBits

// Window is the span of observed time one run covers at most: runs start
// on its multiples.
const Window = audit.RunWindow

// NoMargin stands for a renewal without a margin.
const NoMargin int64 = math.MinInt64

// Renewal is what a run keeps of one renewal.
type Renewal struct {
	At        int64  // when leasewatch observed it, unix ns; kept to the ms
	RenewedAt int64  // the backend's time of it, unix ns; audit.NoNanos: none
	Margin    int64  // margin_ratio × 1000; NoMargin: none
	Position  string // "" or an integer, decimal or 0x-hex (Fits)
	// TTL is the lease as of this renewal, in whole milliseconds as the
	// rows keep it; 0: unknown.
	TTL time.Duration
}

// Position forms.
const (
	formNone = iota
	formDecimal
	formHex
)

// positionForm returns the form of p and its value; ok is false for a
// position a run cannot give back exactly.
func positionForm(p string) (form int, v int64, ok bool) {
	switch {
	case p == "":
		return formNone, 0, true
	case strings.HasPrefix(p, "0x"):
		v, err := strconv.ParseInt(p[2:], 16, 64)
		return formHex, v, err == nil && "0x"+strconv.FormatInt(v, 16) == p
	default:
		v, err := strconv.ParseInt(p, 10, 64)
		return formDecimal, v, err == nil && strconv.FormatInt(v, 10) == p
	}
}

func formatPosition(form int, v int64) string {
	switch form {
	case formDecimal:
		return strconv.FormatInt(v, 10)
	case formHex:
		return "0x" + strconv.FormatInt(v, 16)
	}
	return ""
}

// lowestAt is the earliest observed time whose millisecond is a time the
// encoding holds.
const lowestAt = audit.NoNanos + int64(2*time.Millisecond)

// Fits reports whether a run can keep r: an observed time in range, a
// position it can write back as it was and a lease in whole milliseconds.
func Fits(r Renewal) bool {
	_, _, ok := positionForm(r.Position)
	return ok && r.At >= lowestAt && r.TTL >= 0 && r.TTL%time.Millisecond == 0
}

// floorMs is t in whole milliseconds, rounded down.
func floorMs(t int64) int64 {
	ms := t / 1e6
	if t%1e6 < 0 {
		ms--
	}
	return ms
}

// units are the units backend times are kept in, by their code.
var units = [...]int64{1, 1e3, 1e6, 1e9}

// unitOf returns the code of the coarsest unit that divides every time.
func unitOf(rs []Renewal) byte {
	for u := len(units) - 1; u > 0; u-- {
		if allDivide(rs, units[u]) {
			return byte(u)
		}
	}
	return 0
}

func allDivide(rs []Renewal, unit int64) bool {
	for _, r := range rs {
		if r.RenewedAt%unit != 0 {
			return false
		}
	}
	return true
}

// predictMargin is the margin a renewal at t has when the one before was
// at prev, for a lease of ttl: the share of the lease left, in permille,
// as the tracker reckons it. 0 when there is no prediction.
func predictMargin(prev, t int64, ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	ratio := float64(prev+int64(ttl)-t) / float64(ttl)
	p := math.Round(ratio * 1000)
	if math.Abs(p) >= 1e12 || p != p {
		return 0
	}
	return int64(p)
}

// marginCode is a margin as the margin column keeps it.
func marginCode(m, predicted int64) int64 {
	if m == NoMargin {
		return 0
	}
	d := m - predicted
	return int64(uint64(d<<1)^uint64(d>>63)) + 1
}

func marginOf(code, predicted int64) int64 {
	if code == 0 {
		return NoMargin
	}
	z := uint64(code - 1)
	return int64(z>>1) ^ -int64(z&1) + predicted
}

var errVersion = errors.New("run format not known")

// Encode returns rs, renewals of one lease in the order they were
// observed, as a run. Every renewal must fit (Fits), all or none must have
// a backend time, and their positions one form; Pack makes runs that do.
// The run's row keeps the first renewal's lease (Run.TTL).
func Encode(rs []Renewal) ([]byte, error) { return appendRun(nil, rs) }

// appendRun appends the run of rs (Encode) to dst.
func appendRun(dst []byte, rs []Renewal) ([]byte, error) {
	if len(rs) == 0 || len(rs) > MaxRenewals {
		return dst, fmt.Errorf("a run holds 1 to %d renewals, not %d", MaxRenewals, len(rs))
	}
	k, err := keyOf(rs[0])
	if err != nil {
		return dst, err
	}
	for _, r := range rs[1:] {
		if rk, err := keyOf(r); err != nil || rk != k {
			return dst, errors.New("renewals of one run must all have a backend time or none, and positions of one form")
		}
	}
	c := newColumns(k, rs)
	buf := append(dst, Version, k.flags()|c.unit<<3|c.ttlFlag())
	if k.renewed {
		buf = binary.AppendVarint(buf, rs[0].RenewedAt/units[c.unit]-firstRef(floorMs(rs[0].At), c.unit))
	}
	if k.form != formNone {
		_, p0, _ := positionForm(rs[0].Position)
		buf = binary.AppendVarint(buf, p0)
	}
	buf = binary.AppendVarint(buf, c.m0)
	return c.append(buf), nil
}

// firstRef is the first observed time, a0 in ms, in the unit of code
// unit, floored: what the run's first backend time is kept against.
func firstRef(a0 int64, unit byte) int64 {
	t, u := a0*1e6, units[unit]
	q := t / u
	if t%u < 0 {
		q--
	}
	return q
}

// key is what the renewals of one run share besides their lease and detail.
type key struct {
	renewed bool // they have backend times
	form    int  // their positions' form
}

func keyOf(r Renewal) (key, error) {
	form, _, ok := positionForm(r.Position)
	if !ok || !Fits(r) {
		return key{}, fmt.Errorf("a run cannot keep a renewal at %d with position %q and lease %v", r.At, r.Position, r.TTL)
	}
	return key{renewed: r.RenewedAt != audit.NoNanos, form: form}, nil
}

func (k key) flags() byte {
	f := byte(k.form) << 1
	if k.renewed {
		f |= 1
	}
	return f
}

// Decode returns the run's renewals: its data read with its row's
// renewal count, first observed time and lease.
func (r Run) Decode() ([]Renewal, error) {
	rs, err := decode(r.Data, r.Renewals, r.FirstAt, r.TTL)
	if err != nil {
		return nil, fmt.Errorf("decode renewal run: %w", err)
	}
	return rs, nil
}

func decode(data []byte, n int, firstAt int64, ttl time.Duration) ([]Renewal, error) {
	if len(data) < 2 || data[0] != Version {
		return nil, errVersion
	}
	if n <= 0 || n > MaxRenewals {
		return nil, fmt.Errorf("a run holds 1 to %d renewals, not %d", MaxRenewals, n)
	}
	k := key{renewed: data[1]&1 != 0, form: int(data[1] >> 1 & 3)}
	c := columns{ttl0: ttl, ttlVaries: data[1]&ttlVaries != 0, key: k, first: floorMs(firstAt)}
	if k.renewed {
		c.unit = data[1] >> 3 & 3
	}
	if data[1]&^(ttlVaries|0x1f) != 0 || k.form > formHex || !k.renewed && data[1]>>3&3 != 0 {
		return nil, errors.New("unknown flags")
	}
	if ttl < 0 || ttl%time.Millisecond != 0 {
		return nil, errors.New("a lease not in whole milliseconds")
	}
	if c.first < floorMs(lowestAt) {
		return nil, errRange
	}
	h := header{buf: data[2:]}
	if k.renewed {
		c.q0 = firstRef(c.first, c.unit) + h.varint()
	}
	if k.form != formNone {
		c.p0 = h.varint()
	}
	c.m0 = h.varint()
	if h.err != nil {
		return nil, h.err
	}
	rs := make([]Renewal, n)
	return rs, c.read(&h, rs)
}

// header reads a run's bytes up to its bits.
type header struct {
	buf []byte
	err error
}

func (h *header) uvarint() uint64 {
	v, n := binary.Uvarint(h.buf)
	if n <= 0 {
		h.fail()
		return 0
	}
	h.buf = h.buf[n:]
	return v
}

// varint reads what binary.AppendVarint wrote: a zigzag uvarint.
func (h *header) varint() int64 {
	u := h.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (h *header) fail() {
	if h.err == nil {
		h.err = errShort
	}
	h.buf = nil
}
