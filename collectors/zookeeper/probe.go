package zookeeper

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// consLine picks a session's id, negotiated timeout and last response
// out of one line of cons: " /127.0.0.1:5[1](queued=0,recved=5,sent=5,
// sid=0x1000...,lop=PING,est=...,to=4000,...,lresp=84437641,...)". A
// connection without a session yet has none of them.
var consLine = regexp.MustCompile(`[(,]sid=0x([0-9a-fA-F]+),.*[(,]to=(\d+)[,)].*[(,]lresp=(\d+)[,)]`)

// consSession is one session a server's cons lists.
type consSession struct {
	timeout time.Duration
	lresp   int64 // when the server last answered it, in the server's monotonic milliseconds
	// idle is how long before the probe the server last answered the
	// session, as far as the server's clock can be mapped onto the
	// collector's (serverClock); zero when it cannot.
	idle time.Duration
}

// parseCons returns the sessions one server's cons answer lists.
func parseCons(answer string) (map[int64]consSession, error) {
	if strings.Contains(answer, "not in the whitelist") {
		return nil, fmt.Errorf("cons is not in the server's 4lw.commands.whitelist")
	}
	out := make(map[int64]consSession)
	sc := bufio.NewScanner(strings.NewReader(answer))
	for sc.Scan() {
		m := consLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		sid, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			continue
		}
		ms, _ := strconv.ParseInt(m[2], 10, 64)
		last, _ := strconv.ParseInt(m[3], 10, 64)
		out[int64(sid)] = consSession{timeout: time.Duration(ms) * time.Millisecond, lresp: last}
	}
	return out, nil
}

// serverClock maps one server's monotonic milliseconds (cons's lresp) onto
// the collector's clock. No answer was sent after the probe's answer
// arrived, so the collector's time minus the newest lresp is never less than
// the clocks' true offset; its minimum over the probes approaches it. The
// estimate is thus never early: a session's idle time is never overstated.
type serverClock struct {
	offset int64 // collector Unix ms minus server ms
	newest int64 // the newest lresp seen
	known  bool
}

// sample folds in a probe answered at collector time at whose newest
// lresp was newest. An lresp going back means the server restarted, with
// a new monotonic clock: the estimate starts again.
func (k *serverClock) sample(at time.Time, newest int64) {
	off := at.UnixMilli() - newest
	if !k.known || newest < k.newest {
		k.offset, k.known = off, true
	}
	k.offset, k.newest = min(k.offset, off), newest
}

// idle returns how long before at the server last answered at lresp.
func (k *serverClock) idle(at time.Time, lresp int64) time.Duration {
	return max(0, time.Duration(at.UnixMilli()-lresp-k.offset)*time.Millisecond)
}

// sessions is one probe of every server: the sessions connected to any of
// them, and whether every server answered (else a session missing from the
// list may be connected to the one that did not).
type sessions struct {
	at       time.Time
	listed   map[int64]consSession
	complete bool
	owners   map[int64]bool // the sessions that owned a held lock when probed
}

// probe asks every server's cons for its connected sessions; clocks keeps
// each server's clock estimate from probe to probe.
func (c *Collector) probe(clocks map[string]*serverClock) sessions {
	s := sessions{at: c.now(), listed: make(map[int64]consSession), complete: true}
	for _, addr := range c.cfg.Servers {
		got, err := c.cons(addr)
		if err != nil {
			c.log.Debug("cons failed", "server", addr, "err", err)
			s.complete = false
			continue
		}
		if len(got) == 0 {
			continue
		}
		answered, newest := c.now(), int64(0)
		for _, cs := range got {
			newest = max(newest, cs.lresp)
		}
		k := clocks[addr]
		if k == nil {
			k = &serverClock{}
			clocks[addr] = k
		}
		k.sample(answered, newest)
		for sid, cs := range got {
			cs.idle = k.idle(answered, cs.lresp)
			if prev, ok := s.listed[sid]; !ok || cs.idle < prev.idle {
				s.listed[sid] = cs
			}
		}
	}
	return s
}

// cons sends the cons four-letter word to addr, over TLS when configured.
func (c *Collector) cons(addr string) (map[int64]consSession, error) {
	nc, err := c.dialServer("tcp", addr, c.cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(c.cfg.DialTimeout))
	if _, err := io.WriteString(nc, "cons"); err != nil {
		return nil, err
	}
	// A server with many clients answers at length; a lock's owners are
	// among the first megabytes or the probe is of no use anyway.
	b, err := io.ReadAll(io.LimitReader(nc, 8<<20))
	if err != nil && len(b) == 0 {
		return nil, err
	}
	return parseCons(string(b))
}
