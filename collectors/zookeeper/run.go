package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// run is one connection's watch of the source.
type run struct {
	c    *Collector
	conn *conn
	sink collectors.Sink
	log  *slog.Logger

	roots  []string // the configured paths below the chroot
	tree   *tree    // the last complete read
	wake   chan string
	seenAt time.Time // when the collector last knew it saw everything
	cursor int64     // the zxid of the last read recorded: stored, or in an input on its way
	// flight commits one input while the next gathers what the loop
	// records meanwhile (submit.go).
	flight  collectors.Flight
	probed  sessions // the last probe of the servers' sessions (ProbeSessions)
	vouched sessions // the last probe known to precede every change since (poll)
	clocks  map[string]*serverClock

	mu    sync.Mutex
	armed map[string]int // path -> watches armed on it that have not fired
}

func newRun(c *Collector, cn *conn, sink collectors.Sink) *run {
	r := &run{c: c, conn: cn, sink: sink, log: c.log, tree: newTree(), wake: make(chan string, 64),
		clocks: make(map[string]*serverClock), armed: make(map[string]int)}
	for _, p := range c.cfg.Paths {
		r.roots = append(r.roots, r.fullPath(p))
	}
	slices.Sort(r.roots)
	r.roots = slices.Compact(r.roots)
	return r
}

func (r *run) run(ctx context.Context, ready func()) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	ready()
	defer r.flight.Wait()
	tick := time.NewTicker(r.c.cfg.PollInterval)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case landed := <-r.flight.Landing():
			// Not a lost connection's error, which the loop rides out: the
			// input's observations are not stored.
			if err := r.land(ctx, landed); err != nil {
				return err
			}
		case p := <-r.wake:
			err = r.reread(ctx, r.woken(p))
		case <-r.conn.changed:
			if from, why, ok := r.conn.regained(); ok {
				err = r.resync(ctx, from, why)
			}
		case <-tick.C:
			err = r.poll(ctx)
		}
		if err != nil && !lostConnection(err) {
			return err
		}
	}
}

// lostConnection reports whether err is the session's connection failing:
// the session's callback has seen it, and the re-read once the session is
// back covers what the failed read would have. go-zookeeper answers the
// requests waiting on a broken connection with ErrConnectionClosed, but the
// one whose write failed with the write's own error (a broken pipe, a
// reset): with many reads in flight, one often is.
func lostConnection(err error) bool {
	var netErr net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) || errors.Is(err, zk.ErrSessionMoved) ||
		errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// woken returns p and every other path whose watch has fired meanwhile.
func (r *run) woken(p string) []string {
	paths := []string{p}
	for {
		select {
		case q := <-r.wake:
			paths = append(paths, q)
		default:
			slices.Sort(paths)
			return slices.Compact(paths)
		}
	}
}

// readAll reads every configured path afresh.
func (r *run) readAll(ctx context.Context) (*tree, error) {
	t := newTree()
	for _, root := range r.roots {
		if err := r.readRoot(ctx, t, root); err != nil {
			return nil, fmt.Errorf("read %s: %w", root, err)
		}
	}
	t.settle()
	return t, nil
}

// start takes the first snapshot, or resumes from the stored cursor. No
// history survives in ZooKeeper, so a resume compares the zxid the cursor
// names with the highest one the paths show now: unchanged, the tracker
// already knows this state and nothing is recorded; changed, the time since
// the cursor is a blind window and the snapshot says what is held now.
func (r *run) start(ctx context.Context) error {
	pos, at := r.sink.Cursor(r.c.cfg.Name)
	if _, err := r.conn.zk.Sync(r.roots[0]); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("sync: %w", err)
	}
	t, err := r.readAll(ctx)
	if err != nil {
		return err
	}
	if pos == "" {
		return r.snapshot(ctx, t, nil)
	}
	cur, err := strconv.ParseInt(pos, 10, 64)
	switch {
	case err != nil:
		return r.snapshot(ctx, t, &audit.Blind{From: at, Reason: fmt.Sprintf("stored cursor %q is not a ZooKeeper zxid", pos)})
	case cur != t.zxid:
		return r.snapshot(ctx, t, &audit.Blind{From: at, Reason: fmt.Sprintf(
			"the watched paths changed while the collector was stopped (highest zxid 0x%x at the cursor, 0x%x now)", cur, t.zxid)})
	}
	r.tree, r.cursor, r.seenAt = t, cur, r.c.now()
	r.log.Info("resumed", "zxid", cur, "held", len(r.held(t)))
	return nil
}

// resync reads everything again once the collector's session is back after
// a loss: from the last complete read before it to this read the collector
// was blind, and the snapshot says what is held now. What was recorded
// before the loss is stored first.
func (r *run) resync(ctx context.Context, lost time.Time, why string) error {
	if err := r.settle(ctx); err != nil {
		return err
	}
	if _, err := r.conn.zk.Sync(r.roots[0]); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	t, err := r.readAll(ctx)
	if err != nil {
		return err
	}
	from := r.seenAt
	if from.IsZero() || lost.Before(from) {
		from = lost
	}
	r.log.Warn("session back; recording the blind window", "since", from, "reason", why)
	return r.snapshot(ctx, t, &audit.Blind{From: from, Reason: why})
}

// held returns the owner of every held lock in t, by lock directory path.
func (r *run) held(t *tree) []string {
	var out []string
	for p, d := range t.dirs {
		if d.owner() != nil {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
