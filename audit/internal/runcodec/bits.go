package runcodec

import (
	"errors"
	"math"
	"math/bits"
)

// A column is one field of a run's renewals as residuals (what a
// prediction from the renewals before missed by), stored frame of
// reference with patches: every value less its column's least (the base)
// as one of size symbols, each in the bits a truncated binary code gives
// it (of b = ⌊log₂ size⌋, the first 2^(b+1)-size symbols take b bits and the
// others b+1, so a jitter of 400,000 µs takes 18.7 bits a value, not 19),
// and the few values that do not fit (a missed heartbeat's long interval)
// as an escape, the last symbol, followed by the rest in groups of seven
// bits. The size is chosen per column to make the column smallest: 0 is
// every value in full, 64 bits, no escape; 1 is every offset 0, no bits.
type column struct {
	base int64
	size uint64
}

// plan picks the base and size that store vals in the fewest bits: a
// power of two, or the least size that needs no escape.
func plan(vals []int64) column {
	if len(vals) == 0 {
		return column{}
	}
	base := vals[0]
	for _, v := range vals[1:] {
		base = min(base, v)
	}
	offs := make([]uint64, len(vals))
	var most uint64
	for i, v := range vals {
		offs[i] = uint64(v) - uint64(base)
		most = max(most, offs[i])
	}
	if most == 0 {
		return column{base: base, size: 1}
	}
	best, bestCost := uint64(0), 64*len(vals)
	try := func(size uint64) {
		if cost := sizeCost(size, offs); cost < bestCost {
			best, bestCost = size, cost
		}
	}
	for w := 1; w <= min(bits.Len64(most), 63); w++ {
		try(uint64(1) << w)
	}
	if most < math.MaxUint64>>1 {
		try(most + 2)
	}
	return column{base: base, size: best}
}

// sizeCost is the bits offs take as symbols of an alphabet of size.
func sizeCost(size uint64, offs []uint64) int {
	esc := size - 1
	cost := 0
	for _, off := range offs {
		if off < esc {
			cost += symbolBits(off, size)
		} else {
			cost += symbolBits(esc, size) + escapeBits(bits.Len64(off-esc))
		}
	}
	return cost
}

// truncated returns the truncated binary code of an alphabet of size (2
// or more): symbols below u take b bits, the others b+1.
func truncated(size uint64) (b uint8, u uint64) {
	b = uint8(bits.Len64(size) - 1)
	return b, uint64(1)<<(b+1) - size // 1<<64 is 0: u wraps to 2^64-size, as it should
}

func symbolBits(sym, size uint64) int {
	b, u := truncated(size)
	if sym < u {
		return int(b)
	}
	return int(b) + 1
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
	switch c.size {
	case 0:
		w.write(off, 64)
		return
	case 1:
		return // every offset is 0
	}
	esc := c.size - 1
	b, u := truncated(c.size)
	sym := min(off, esc)
	if sym < u {
		w.write(sym, b)
	} else {
		w.write(sym+u, b+1)
	}
	if off < esc {
		return
	}
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
	switch c.size {
	case 0:
		off, err := r.read(64)
		return int64(off + uint64(c.base)), err
	case 1:
		return c.base, nil
	}
	esc := c.size - 1
	b, u := truncated(c.size)
	sym, err := r.read(b)
	if err != nil {
		return 0, err
	}
	if sym >= u {
		low, err := r.read(1)
		if err != nil {
			return 0, err
		}
		sym = (sym<<1 | low) - u
	}
	if sym < esc {
		return int64(sym + uint64(c.base)), nil
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
	return int64(esc + rest + uint64(c.base)), nil
}
