package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
)

// span is a stretch of time: a hold, or a tenure leasewatch stored.
type span struct{ from, to time.Time }

// advisoryHold is one hold of a session's key, as the client saw it.
// The server's hold lies between the two: it contains inner (from the
// return of pg_advisory_lock to the sending of pg_advisory_unlock) and
// lies inside outer (from the sending of the one to the return of the
// other), so a poll that saw it falls inside outer however late the
// client's goroutines ran.
type advisoryHold struct {
	inner, outer span
	cut          bool // the load stopped during the hold and cut it short
}

// advisorySession is one session of the load and the holds it made.
type advisorySession struct {
	key   int64
	holds []advisoryHold
}

// holdLoop takes s's key, holds it for a random time in [min, max],
// releases it and waits as long again, until ctx ends, logging each hold.
func holdLoop(ctx context.Context, conn *pgx.Conn, s *advisorySession, minHold, maxHold time.Duration, failed *atomic.Int64) {
	random := func() time.Duration { return minHold + rand.N(maxHold-minHold+1) }
	// Sessions start spread over a pause, not all at once.
	if sleep(ctx, random()) != nil {
		return
	}
	bg := context.Background() // a call under way when the load stops finishes
	for ctx.Err() == nil {
		var h advisoryHold
		h.outer.from = time.Now()
		if _, err := conn.Exec(bg, `SELECT pg_advisory_lock($1)`, s.key); err != nil {
			failed.Add(1)
			return
		}
		h.inner.from = time.Now()
		h.cut = sleep(ctx, random()) != nil
		h.inner.to = time.Now()
		if _, err := conn.Exec(bg, `SELECT pg_advisory_unlock($1)`, s.key); err != nil {
			failed.Add(1)
			return
		}
		h.outer.to = time.Now()
		s.holds = append(s.holds, h)
		if sleep(ctx, random()) != nil {
			return
		}
	}
}

// openSessions opens n connections to the rig's load database, a few at a
// time.
func openSessions(ctx context.Context, rig *pgRig, n int) ([]*pgx.Conn, error) {
	conns := make([]*pgx.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 16)
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := rig.connect(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("session %d: %w", i, err)
			}
			conns[i] = c
		})
	}
	wg.Wait()
	if first != nil {
		closeSessions(conns)
		return nil, first
	}
	return conns, nil
}

func closeSessions(conns []*pgx.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close(context.Background())
		}
	}
}

func (k *pgLoad) runAdvisory(ctx context.Context, out, log io.Writer) error {
	if k.holdMin <= 0 || k.holdMax < k.holdMin {
		return errors.New("want 0 < --hold-min <= --hold-max")
	}
	dir, done, err := runFolder(k.keep, log)
	if err != nil {
		return err
	}
	defer done()
	settings := map[string]string{"max_connections": strconv.Itoa(k.advisorySessions + 20)}
	rig, err := startPGRig(ctx, k.leasewatch, dir, settings, "", fmt.Sprintf("    poll_every: %s\n", k.pollEvery), log)
	if err != nil {
		return err
	}
	defer rig.close()
	collector, err := rig.backendPid(ctx, "leasewatch")
	if err != nil {
		return fmt.Errorf("the collector's server process: %w", err)
	}
	conns, err := openSessions(ctx, rig, k.advisorySessions)
	if err != nil {
		return err
	}
	defer closeSessions(conns)

	fmt.Fprintf(log, "%d sessions, each holding its advisory key for %s to %s and pausing as long, polled every %s: %s of warm-up, %s measured\n",
		k.advisorySessions, k.holdMin, k.holdMax, k.pollEvery, k.warmup, k.duration)
	sessions := make([]*advisorySession, len(conns))
	var failed atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, c := range conns {
		sessions[i] = &advisorySession{key: int64(1000 + i)}
		wg.Go(func() { holdLoop(loadCtx, c, sessions[i], k.holdMin, k.holdMax, &failed) })
	}
	backendBefore, _ := readProcStats(collector)
	serverBefore := serverCPU(rig.srv.Pid())
	w, err := measure(ctx, rig.lw.url, rig.lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	backendAfter, _ := readProcStats(collector)
	serverAfter := serverCPU(rig.srv.Pid())
	stopLoad()
	wg.Wait()
	if err != nil {
		return err
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d sessions' lock or unlock calls failed", n)
	}
	return k.verifyAdvisory(ctx, out, rig, sessions, w, backendAfter.cpu-backendBefore.cpu, serverAfter-serverBefore)
}

// verifyAdvisory waits for leasewatch's last polls, compares the holds
// the sessions made with the tenures it stored, and writes the run's table.
func (k *pgLoad) verifyAdvisory(ctx context.Context, out io.Writer, rig *pgRig, sessions []*advisorySession, w window, backend, server time.Duration) error {
	// Every key is free now: once leasewatch has stored as many releases
	// as grants, and a poll more, it has seen the end of every hold.
	if err := waitFor(ctx, time.Minute, "leasewatch to record the last releases", func() bool {
		return recorded(ctx, rig.lw.url, loadSource, "grant") == recorded(ctx, rig.lw.url, loadSource, "release")+recorded(ctx, rig.lw.url, loadSource, "expire")
	}); err != nil {
		return err
	}
	if err := sleep(ctx, 2*k.pollEvery); err != nil {
		return err
	}
	tenures := map[string][]span{}
	open := map[string]time.Time{}
	kinds := []audit.EventKind{audit.EventGrant, audit.EventObserved, audit.EventRelease, audit.EventExpire}
	err := storedEvents(ctx, rig.lw.database, loadSource, kinds, func(name string, e audit.Event) {
		switch e.Kind {
		case audit.EventGrant, audit.EventObserved:
			open[name] = e.At
		default:
			tenures[name] = append(tenures[name], span{from: open[name], to: e.At})
			delete(open, name)
		}
	})
	if err != nil {
		return err
	}
	var holds []heldSeen
	for _, s := range sessions {
		// The lock's name is its database and key (see the collector's row.lock).
		holds = append(holds, matchHolds(s.holds, tenures[rig.db+"/"+strconv.FormatInt(s.key, 10)], k.pollEvery/10)...)
	}
	seen := seenByLength(holds, k.holdMin, k.holdMax)
	wall := w.procAfter.at.Sub(w.procBefore.at)
	polls := wall.Seconds() / k.pollEvery.Seconds()
	lwCPU := w.procAfter.cpu - w.procBefore.cpu
	w.write(out, fmt.Sprintf("leasewatch-load postgres --advisory-sessions %d: each session holds its own advisory key (pg_advisory_lock) for %s to %s, unlocks and pauses as long, over again; poll_every %s, %s measured after %s warm-up",
		k.advisorySessions, k.holdMin, k.holdMax, k.pollEvery, k.duration, k.warmup), [][2]string{
		{"polls in the window (wall / poll_every)", fmt.Sprintf("%.0f", polls)},
		{"leasewatch CPU per poll (its whole process: the poll and recording what it showed)", fmt.Sprintf("%.1f ms", lwCPU.Seconds()*1e3/polls)},
		{"collector's server process CPU per poll (its backend, from /proc)", fmt.Sprintf("%.1f ms (%.1f%% of one core)", backend.Seconds()*1e3/polls, 100*backend.Seconds()/wall.Seconds())},
		{"PostgreSQL CPU, every server process (the sessions' backends included)", fmt.Sprintf("%.1f%% of one core", 100*server.Seconds()/wall.Seconds())},
		{"holds made / seen by a poll", seen.summary()},
		{"shortest hold from which every hold was seen", seen.reliable()},
		{"seen by hold length", seen.byLength()},
	})
	if seen.falseTenures > 0 {
		return fmt.Errorf("%d tenures stored that no hold made", seen.falseTenures)
	}
	return nil
}

// heldSeen is one hold, whether a stored tenure covered part of it, and,
// for a tenure stored that no hold made, a zero hold.
type heldSeen struct {
	length time.Duration
	seen   bool
	stray  bool // a stored tenure that overlaps no hold
}

// matchHolds says of each of a session's holds, but one cut short, whether
// a stored tenure of its key overlaps its outer span (within slack: a
// poll's time is taken around its read), and adds a stray entry for each
// tenure that overlaps none. A hold's length is its inner span's.
func matchHolds(holds []advisoryHold, tenures []span, slack time.Duration) []heldSeen {
	out := make([]heldSeen, 0, len(holds))
	used := make([]bool, len(tenures))
	for _, h := range holds {
		hs := heldSeen{length: h.inner.to.Sub(h.inner.from)}
		for j, t := range tenures {
			if !t.from.After(h.outer.to.Add(slack)) && !t.to.Before(h.outer.from.Add(-slack)) {
				hs.seen, used[j] = true, true
			}
		}
		if !h.cut { // a hold the load's end cut short is no measure of anything
			out = append(out, hs)
		}
	}
	for j := range tenures {
		if !used[j] {
			out = append(out, heldSeen{stray: true})
		}
	}
	return out
}

// holdsSeen sums heldSeens by hold length.
type holdsSeen struct {
	made, seen   int
	falseTenures int
	// buckets of hold length, each with holds made and seen
	edges             []time.Duration
	madeIn, seenIn    []int
	shortestAllSeenAt time.Duration // every hold at least this long was seen; 0: none made
	shortestMissed    time.Duration // -1: none missed
}

// seenByLength sums holds into ten buckets of length between minHold and
// maxHold.
func seenByLength(holds []heldSeen, minHold, maxHold time.Duration) holdsSeen {
	s := holdsSeen{shortestMissed: -1}
	step := max((maxHold-minHold)/10, time.Millisecond)
	for e := minHold; e < maxHold; e += step {
		s.edges = append(s.edges, e)
	}
	s.madeIn, s.seenIn = make([]int, len(s.edges)), make([]int, len(s.edges))
	longestMissed := time.Duration(-1)
	shortest := time.Duration(-1)
	for _, h := range holds {
		if h.stray {
			s.falseTenures++
			continue
		}
		s.made++
		b := min(max(int((h.length-minHold)/step), 0), len(s.edges)-1)
		s.madeIn[b]++
		if shortest < 0 || h.length < shortest {
			shortest = h.length
		}
		if h.seen {
			s.seen++
			s.seenIn[b]++
			continue
		}
		if s.shortestMissed < 0 || h.length < s.shortestMissed {
			s.shortestMissed = h.length
		}
		longestMissed = max(longestMissed, h.length)
	}
	s.shortestAllSeenAt = shortest
	if longestMissed >= 0 {
		s.shortestAllSeenAt = longestMissed // every longer one was seen
	}
	return s
}

func (s holdsSeen) summary() string {
	return fmt.Sprintf("%d / %d (%.2f%%); tenures stored that no hold made: %d", s.made, s.seen, 100*float64(s.seen)/float64(max(s.made, 1)), s.falseTenures)
}

func (s holdsSeen) reliable() string {
	switch {
	case s.made == 0:
		return "n/a (no holds)"
	case s.shortestMissed < 0:
		return fmt.Sprintf("every hold seen; the shortest was %s", s.shortestAllSeenAt.Round(time.Millisecond))
	}
	return fmt.Sprintf("longer than %s (the longest missed; the shortest missed %s)", s.shortestAllSeenAt.Round(time.Millisecond), s.shortestMissed.Round(time.Millisecond))
}

func (s holdsSeen) byLength() string {
	var parts []string
	for i, e := range s.edges {
		if s.madeIn[i] > 0 {
			parts = append(parts, fmt.Sprintf("≥%s: %d/%d", e.Round(time.Millisecond), s.seenIn[i], s.madeIn[i]))
		}
	}
	return strings.Join(parts, ", ")
}
