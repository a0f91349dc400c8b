package runcodec

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The columns of a run, in the order they are stored.
const (
	colInterval = iota
	colLag
	colMargin
	colPosition
	colTTL
	numColumns
)

// columns is a run's renewals as residuals, column by column.
type columns struct {
	ttl0      time.Duration // the first renewal's lease
	ttlVaries bool          // the lease changes within the run
	key
	unit  byte  // code of the unit backend times are kept in
	first int64 // the first observed time, in ms
	q0    int64 // with backend times, the first in the unit
	p0    int64 // the first position
	m0    int64 // the first renewal's margin code, which nothing predicts
	vals  [numColumns][]int64
}

// count is how many values column col has in a run of n renewals.
func (c *columns) count(col, n int) int {
	switch col {
	case colInterval:
		if c.renewed {
			return n - 1
		}
	case colLag, colMargin:
		return n - 1
	case colPosition:
		if c.form != formNone {
			return n - 1
		}
	case colTTL:
		if c.ttlVaries {
			return n - 1
		}
	}
	return 0
}

// ttlVaries is the flag of a run whose lease changes.
const ttlVaries = 1 << 5

func (c *columns) ttlFlag() byte {
	if c.ttlVaries {
		return ttlVaries
	}
	return 0
}

// newColumns computes the residuals of rs, which share key k.
func newColumns(k key, rs []Renewal) columns {
	c := columns{ttl0: rs[0].TTL, key: k}
	if k.renewed {
		c.unit = unitOf(rs)
	}
	unit := units[c.unit]
	var prevQ, prevA, prevT, prevP int64
	prevTTL := rs[0].TTL
	for i, r := range rs {
		a := floorMs(r.At)
		t := a * 1e6
		if k.renewed {
			q := r.RenewedAt / unit
			if i > 0 {
				c.vals[colInterval] = append(c.vals[colInterval], q-prevQ)
				c.vals[colLag] = append(c.vals[colLag], a-floorMs(r.RenewedAt))
			}
			prevQ, t = q, r.RenewedAt
		} else if i > 0 {
			c.vals[colLag] = append(c.vals[colLag], a-prevA)
		}
		if i == 0 {
			c.m0 = marginCode(r.Margin, 0)
		} else {
			c.vals[colMargin] = append(c.vals[colMargin], marginCode(r.Margin, predictMargin(prevT, t, prevTTL)))
			c.vals[colTTL] = append(c.vals[colTTL], (r.TTL - c.ttl0).Milliseconds())
			c.ttlVaries = c.ttlVaries || r.TTL != prevTTL
		}
		if k.form != formNone {
			_, p, _ := positionForm(r.Position)
			if i > 0 {
				c.vals[colPosition] = append(c.vals[colPosition], p-prevP)
			}
			prevP = p
		}
		prevA, prevT, prevTTL = a, t, r.TTL
	}
	if !c.ttlVaries {
		c.vals[colTTL] = nil
	}
	return c
}

// append writes the columns' headers and bits after buf.
func (c *columns) append(buf []byte) []byte {
	var plans [numColumns]column
	for col, vals := range c.vals {
		if len(vals) == 0 {
			continue
		}
		plans[col] = plan(vals)
		buf = binary.AppendVarint(buf, plans[col].base)
		buf = binary.AppendUvarint(buf, plans[col].size)
	}
	w := bitWriter{buf: buf}
	for col, vals := range c.vals {
		for _, v := range vals {
			w.put(plans[col], v)
		}
	}
	return w.buf
}

// read reads the columns' headers and bits from h into rs.
func (c *columns) read(h *header, rs []Renewal) error {
	n := len(rs)
	var plans [numColumns]column
	for col := range numColumns {
		if c.count(col, n) == 0 {
			continue
		}
		plans[col] = column{base: h.varint(), size: h.uvarint()}
	}
	if h.err != nil {
		return h.err
	}
	r := bitReader{buf: h.buf}
	for col := range numColumns {
		vals := make([]int64, c.count(col, n))
		for i := range vals {
			v, err := r.get(plans[col])
			if err != nil {
				return err
			}
			vals[i] = v
		}
		c.vals[col] = vals
	}
	if rest := uint64(len(r.buf))*8 - r.pos; rest >= 8 || rest > 0 && r.buf[len(r.buf)-1]&(1<<rest-1) != 0 {
		return errors.New("bytes after the run")
	}
	return c.rebuild(rs)
}

// rebuild turns the columns' residuals back into renewals.
func (c *columns) rebuild(rs []Renewal) error {
	unit := units[c.unit]
	q, a, p, ttl0 := c.q0, c.first, c.p0, c.ttl0.Milliseconds()
	ttl := ttl0
	var prevT int64
	for i := range rs {
		r := &rs[i]
		t := int64(0)
		if c.renewed {
			if i > 0 {
				q += c.vals[colInterval][i-1]
			}
			if q < math.MinInt64/unit || q > math.MaxInt64/unit || q*unit == audit.NoNanos {
				return errRange
			}
			r.RenewedAt = q * unit
			if i > 0 {
				a = c.vals[colLag][i-1] + floorMs(r.RenewedAt)
			}
			t = r.RenewedAt
		} else {
			r.RenewedAt = audit.NoNanos
			if i > 0 {
				a += c.vals[colLag][i-1]
			}
			t = a * 1e6
		}
		if a < floorMs(lowestAt) || a > math.MaxInt64/int64(time.Millisecond) {
			return errRange
		}
		r.At = a * 1e6
		if i == 0 {
			r.Margin = marginOf(c.m0, 0)
		} else {
			r.Margin = marginOf(c.vals[colMargin][i-1], predictMargin(prevT, t, time.Duration(ttl)*time.Millisecond))
			if c.ttlVaries {
				ttl = ttl0 + c.vals[colTTL][i-1]
			}
		}
		if ttl < 0 || ttl > math.MaxInt64/int64(time.Millisecond) {
			return errors.New("a lease out of range")
		}
		r.TTL = time.Duration(ttl) * time.Millisecond
		if c.form != formNone {
			if i > 0 {
				p += c.vals[colPosition][i-1]
			}
			r.Position = formatPosition(c.form, p)
		}
		prevT = t
	}
	return nil
}

var errRange = errors.New("a time out of range")
