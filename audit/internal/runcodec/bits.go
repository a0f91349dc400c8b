package runcodec

import (
	"errors"
	"math"
	"math/bits"
)

// A column is one field of a run's renewals as residuals (what a
// prediction from the renewals before missed by), stored frame of
// reference with patches: every value less its column's least (the base)
// in one width of bits, chosen per column to make the column smallest,
// and the few values that do not fit in it (a missed heartbeat's long
// interval) as an escape, the width's all-ones, followed by the rest in
// groups of seven bits.
type column struct {
	base  int64
	width uint8 // 0..64; 64 is every value in full, no escape
}

// plan picks the base and width that store vals in the fewest bits.
func plan(vals []int64) column {
	if len(vals) == 0 {
		return column{}
	}
	base := vals[0]
	for _, v := range vals[1:] {
		base = min(base, v)
	}
	// An offset fits a width w if it is less than w ones, which escape.
	// Width 0 has no escape: it holds nothing but offsets of 0.
	offs := make([]uint64, len(vals))
	var most int
	for i, v := range vals {
		offs[i] = uint64(v) - uint64(base)
		most = max(most, bits.Len64(offs[i]))
	}
	if most == 0 {
		return column{base: base}
	}
	best, bestCost := uint8(64), 64*len(vals)
	for w := 1; w <= min(most, 63); w++ {
		esc := uint64(1)<<w - 1
		cost := w * len(vals)
		for _, off := range offs {
			if off >= esc {
				cost += escapeBits(bits.Len64(off - esc))
			}
		}
		if cost < bestCost {
			best, bestCost = uint8(w), cost
		}
	}
	return column{base: base, width: best}
}

// escapeBits is the bits the rest of an escaped offset of b bits takes:
// groups of seven, each with a continuation bit.
func escapeBits(b int) int { return 8 * max(1, (b+6)/7) }

// bitWriter appends bits to a byte slice, most significant first.
type bitWriter struct {
	buf  []byte
	free uint8 // unused low bits of the last byte
}

func (w *bitWriter) write(v uint64, n uint8) {
	for n > 0 {
		if w.free == 0 {
			w.buf = append(w.buf, 0)
			w.free = 8
		}
		take := min(n, w.free)
		chunk := byte(v>>(n-take)) & (1<<take - 1)
		w.buf[len(w.buf)-1] |= chunk << (w.free - take)
		w.free -= take
		n -= take
	}
}

// put writes one value of column c.
func (w *bitWriter) put(c column, v int64) {
	off := uint64(v) - uint64(c.base)
	switch c.width {
	case 0:
		return // every offset is 0
	case 64:
		w.write(off, 64)
		return
	}
	esc := uint64(1)<<c.width - 1
	if off < esc {
		w.write(off, c.width)
		return
	}
	w.write(esc, c.width)
	rest := off - esc
	for {
		group := rest & 0x7f
		rest >>= 7
		if rest == 0 {
			w.write(group, 8)
			return
		}
		w.write(0x80|group, 8)
	}
}

var errShort = errors.New("run ends early")

// bitReader reads what a bitWriter wrote.
type bitReader struct {
	buf []byte
	pos uint64 // in bits
}

func (r *bitReader) read(n uint8) (uint64, error) {
	if uint64(n) > uint64(len(r.buf))*8-r.pos {
		return 0, errShort
	}
	var v uint64
	for n > 0 {
		i, used := r.pos/8, uint8(r.pos%8)
		take := min(n, 8-used)
		chunk := uint64(r.buf[i]>>(8-used-take)) & (1<<take - 1)
		v = v<<take | chunk
		r.pos += uint64(take)
		n -= take
	}
	return v, nil
}

// get reads one value of column c.
func (r *bitReader) get(c column) (int64, error) {
	if c.width == 64 {
		off, err := r.read(64)
		return int64(off + uint64(c.base)), err
	}
	esc := uint64(1)<<c.width - 1
	off, err := r.read(c.width)
	if err != nil || off < esc || c.width == 0 {
		return int64(off + uint64(c.base)), err
	}
	var rest uint64
	for shift := uint(0); ; shift += 7 {
		group, err := r.read(8)
		if err != nil {
			return 0, err
		}
		if shift > 63 || shift == 63 && group&0x7f > 1 {
			return 0, errors.New("escaped value overflows 64 bits")
		}
		rest |= (group & 0x7f) << shift
		if group&0x80 == 0 {
			break
		}
	}
	if rest > math.MaxUint64-esc {
		return 0, errors.New("escaped value overflows 64 bits")
	}
	return int64(off + rest + uint64(c.base)), nil
}
