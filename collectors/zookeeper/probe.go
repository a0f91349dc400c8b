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

// consLine picks a session's id and negotiated timeout out of one line of
// cons: " /127.0.0.1:5[1](queued=0,recved=5,sent=5,sid=0x1000...,lop=PING,
// est=...,to=4000,...)". A connection without a session yet has neither.
var consLine = regexp.MustCompile(`[(,]sid=0x([0-9a-fA-F]+),.*[(,]to=(\d+)[,)]`)

// parseCons returns the sessions one server's cons answer lists, with
// their negotiated timeouts.
func parseCons(answer string) (map[int64]time.Duration, error) {
	if strings.Contains(answer, "not in the whitelist") {
		return nil, fmt.Errorf("cons is not in the server's 4lw.commands.whitelist")
	}
	out := make(map[int64]time.Duration)
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
		out[int64(sid)] = time.Duration(ms) * time.Millisecond
	}
	return out, nil
}

// sessions is one probe of every server: the sessions connected to any of
// them, and whether every server answered (else a session missing from the
// list may be connected to the one that did not).
type sessions struct {
	at       time.Time
	timeouts map[int64]time.Duration
	complete bool
	owners   map[int64]bool // the sessions that owned a held lock when probed
}

// probe asks every server's cons for its connected sessions.
func (c *Collector) probe() sessions {
	s := sessions{at: c.now(), timeouts: make(map[int64]time.Duration), complete: true}
	for _, addr := range c.cfg.Servers {
		got, err := c.cons(addr)
		if err != nil {
			c.log.Debug("cons failed", "server", addr, "err", err)
			s.complete = false
			continue
		}
		for sid, to := range got {
			s.timeouts[sid] = to
		}
	}
	return s
}

// cons sends the cons four-letter word to addr, over TLS when configured.
func (c *Collector) cons(addr string) (map[int64]time.Duration, error) {
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
