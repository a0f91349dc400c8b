package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasewatch/leasewatch/audit"
)

// shedlockSchema is ShedLock's PostgreSQL table, as its README creates it,
// and the load's log of the changes it makes to it: one row per change,
// written by the same statement, so in the same transaction, whose commit
// time the server keeps (track_commit_timestamp).
const shedlockSchema = `
CREATE TABLE shedlock (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,
	locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name));
CREATE TABLE shedlock_log (id bigserial PRIMARY KEY, name text NOT NULL, kind text NOT NULL, locked_by text NOT NULL);`

// ShedLock's statements (its PostgreSQL storage accessor), each logging
// the change it made, if it made one, in the same statement. Times are the
// writer's clock, as ShedLock's are unless usingDbTime() is set.
const (
	// shedlockGrant takes a lock whose lease ran out (or a new one):
	// $1 name, $2 lock_until, $3 now, $4 locked_by.
	shedlockGrant = `WITH c AS (INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ($1, $2, $3, $4)
	ON CONFLICT (name) DO UPDATE SET lock_until = $2, locked_at = $3, locked_by = $4 WHERE shedlock.lock_until <= $3
	RETURNING name, locked_by)
INSERT INTO shedlock_log (name, kind, locked_by) SELECT name, 'grant', locked_by FROM c`
	// shedlockExtend moves a held lock's lock_until: $1 name, $2 lock_until,
	// $3 now, $4 locked_by.
	shedlockExtend = `WITH c AS (UPDATE shedlock SET lock_until = $2 WHERE name = $1 AND locked_by = $4 AND lock_until > $3
	RETURNING name, locked_by)
INSERT INTO shedlock_log (name, kind, locked_by) SELECT name, 'renew', locked_by FROM c`
	// shedlockUnlock ends the lease now: $1 name, $2 now.
	shedlockUnlock = `WITH c AS (UPDATE shedlock SET lock_until = $2 WHERE name = $1 RETURNING name, locked_by)
INSERT INTO shedlock_log (name, kind, locked_by) SELECT name, 'release', locked_by FROM c`
	// shedlockLockAtMostFor is each grant's and extension's lease.
	shedlockLockAtMostFor = 30 * time.Second
)

// shedlockRow is one lock's place in its cycle: a grant, the extensions,
// the unlock, over again. Only its writer touches it.
type shedlockRow struct {
	name   string
	step   int
	grants int
	holder string
}

// shedlockTally is what the writers did, as the server answered.
type shedlockTally struct {
	made        [3]atomic.Int64 // by step kind: grant, renew, release
	refused     atomic.Int64    // a statement that changed no row
	failed      atomic.Int64    // an error: the change may or may not have committed
	skipped     atomic.Int64    // a row's writer was behind
	firstErr    atomic.Value
	start, stop time.Time
}

// shedlockKinds are the events of a row's steps, by stepKind.
var shedlockKinds = [3]string{"grant", "renew", "release"}

// stepKind is the kind of a row's step in a cycle of renewals extensions.
func stepKind(step, renewals int) int {
	switch s := step % (renewals + 2); {
	case s == 0:
		return 0
	case s <= renewals:
		return 1
	default:
		return 2
	}
}

// write runs row's next statement on conn and counts what it did.
func (k *pgLoad) write(ctx context.Context, conn *pgx.Conn, row *shedlockRow, t *shedlockTally) {
	now := time.Now().UTC()
	kind := stepKind(row.step, k.renewals)
	var tag pgconn.CommandTag
	var err error
	switch kind {
	case 0:
		row.holder = "node-" + strconv.Itoa(row.grants%5)
		tag, err = conn.Exec(ctx, shedlockGrant, row.name, now.Add(shedlockLockAtMostFor), now, row.holder)
	case 1:
		tag, err = conn.Exec(ctx, shedlockExtend, row.name, now.Add(shedlockLockAtMostFor), now, row.holder)
	default:
		tag, err = conn.Exec(ctx, shedlockUnlock, row.name, now)
	}
	switch {
	case err != nil:
		t.failed.Add(1)
		t.firstErr.CompareAndSwap(nil, err.Error())
		return // try the same step again next time
	case tag.RowsAffected() != 1:
		t.refused.Add(1)
		return
	}
	t.made[kind].Add(1)
	if kind == 0 {
		row.grants++
	}
	row.step++
}

// drive writes the rows on conns until ctx ends, each row's changes by
// one writer in order, and returns once every writer has stopped.
func (k *pgLoad) drive(ctx context.Context, conns []*pgx.Conn, t *shedlockTally) {
	rows := make([]shedlockRow, k.locks)
	for i := range rows {
		rows[i].name = "job-" + strconv.Itoa(i)
	}
	queues := make([]chan int, k.writers)
	var wg sync.WaitGroup
	for w := range queues {
		queues[w] = make(chan int, 2*k.locks/k.writers+1)
		wg.Go(func() {
			for i := range queues[w] {
				// A write under way when the load stops finishes: one cut
				// off could commit unanswered.
				k.write(context.Background(), conns[w], &rows[i], t)
			}
		})
	}
	t.start = time.Now()
	period := time.Duration(int64(time.Second) * int64(k.locks) / int64(k.rate))
	dispatch(ctx, k.locks, period, func(i int) {
		select {
		case queues[i%k.writers] <- i:
		default: // the row's writer is behind: skip rather than queue without bound
			t.skipped.Add(1)
		}
	})
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	t.stop = time.Now()
}

func (k *pgLoad) runTable(ctx context.Context, out, log io.Writer) error {
	if k.locks < 1 || k.rate < 1 || k.writers < 1 || k.renewals < 0 {
		return errors.New("want at least one lock, a positive --rate and --writers, and --renewals of 0 or more")
	}
	dir, done, err := runFolder(k.keep, log)
	if err != nil {
		return err
	}
	defer done()
	rig, err := startPGRig(ctx, k.leasewatch, dir, nil, shedlockSchema, fmt.Sprintf(`    advisory: false
    poll_every: %s
    tables:
      - preset: shedlock
`, k.pollEvery), log)
	if err != nil {
		return err
	}
	defer rig.close()

	fmt.Fprintf(log, "%d ShedLock rows, %d row changes/s from %d writers (grant, %d extensions, unlock): %s of warm-up, %s measured\n",
		k.locks, k.rate, k.writers, k.renewals, k.warmup, k.duration)
	conns, err := openSessions(ctx, rig, k.writers)
	if err != nil {
		return err
	}
	defer closeSessions(conns)
	t := &shedlockTally{}
	loadCtx, stopLoad := context.WithCancel(ctx)
	driven := make(chan struct{})
	go func() {
		k.drive(loadCtx, conns, t)
		close(driven)
	}()
	serverBefore := serverCPU(rig.srv.Pid())
	w, err := measure(ctx, rig.lw.url, rig.lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	serverAfter := serverCPU(rig.srv.Pid())
	stopLoad()
	<-driven
	if err != nil {
		return err
	}
	return k.verifyTable(ctx, out, rig, t, w, serverAfter-serverBefore)
}

// verifyTable drains leasewatch, compares every logged change with the
// events it stored, and writes the run's table to out.
func (k *pgLoad) verifyTable(ctx context.Context, out io.Writer, rig *pgRig, t *shedlockTally, w window, server time.Duration) error {
	made := map[string]float64{}
	var total int64
	for i, kind := range shedlockKinds {
		made[kind] = float64(t.made[i].Load())
		total += t.made[i].Load()
	}
	drainCtx, cancel := context.WithTimeout(ctx, k.drain)
	drained := drain(drainCtx, rig.lw.url, loadSource, made)
	cancel()
	logged, err := loggedChanges(ctx, rig)
	if err != nil {
		return err
	}
	var stored []rowChange
	kinds := []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRelease}
	err = storedEvents(ctx, rig.lw.database, loadSource, kinds, func(name string, e audit.Event) {
		stored = append(stored, rowChange{lock: name, kind: string(e.Kind), holder: e.Holder, at: e.At})
	})
	if err != nil {
		return err
	}
	c := checkChanges(logged, stored)
	lag := histogramBetween(w.before, w.after, "leasewatch_observation_lag_seconds", map[string]string{"source": loadSource})
	p99 := time.Duration(lag.quantile(0.99) * float64(time.Second))
	wall := w.procAfter.at.Sub(w.procBefore.at)
	firstErr, _ := t.firstErr.Load().(string)
	w.write(out, fmt.Sprintf("leasewatch-load postgres: %d ShedLock rows (preset shedlock, streamed by logical replication), each taken, extended %d times and unlocked in turn with ShedLock's statements, %d row changes/s offered by %d writers, %s measured after %s warm-up; lag is the row change's commit (its commit record's time; a grant's locked_at) → stored",
		k.locks, k.renewals, k.rate, k.writers, k.duration, k.warmup), [][2]string{
		{"row changes achieved", fmt.Sprintf("%.0f/s (%d skipped while a writer was behind, %d statements refused, %d failed%s)",
			float64(total)/t.stop.Sub(t.start).Seconds(), t.skipped.Load(), t.refused.Load(), t.failed.Load(), orNone(firstErr))},
		{"PostgreSQL CPU (every server process)", fmt.Sprintf("%.1f%% of one core", 100*server.Seconds()/wall.Seconds())},
		{"backlog after the load stopped", "recorded " + drained},
		{"changes logged (grants / extensions / unlocks)", fmt.Sprintf("%d (%d / %d / %d)", len(logged), t.made[0].Load(), t.made[1].Load(), t.made[2].Load())},
		{"events stored (grant, renew, release)", strconv.Itoa(len(stored))},
		{"change by change (lock, kind, holder, commit time)", c.summary()},
		{"observation lag p99", fmt.Sprintf("%s (target < %s)", p99.Round(100*time.Microsecond), k.target)},
	})
	var problems []string
	if c.missed > 0 || c.twice > 0 || c.unlogged > 0 || int64(len(logged)) != total {
		problems = append(problems, fmt.Sprintf("%d changes made, %d logged; %s", total, len(logged), c.summary()))
	}
	if t.failed.Load() > 0 {
		problems = append(problems, fmt.Sprintf("%d statements failed (%s)", t.failed.Load(), firstErr))
	}
	if p99 >= k.target || lag.count() == 0 {
		problems = append(problems, fmt.Sprintf("observation lag p99 %s, over the %s target (%.0f samples)", p99, k.target, lag.count()))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// orNone is ": s" or nothing.
func orNone(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// loggedChanges reads the load's log of its changes, with each one's
// commit time as the server recorded it.
func loggedChanges(ctx context.Context, rig *pgRig) ([]rowChange, error) {
	conn, err := rig.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT 'shedlock/' || name, kind, locked_by, pg_xact_commit_timestamp(xmin) FROM shedlock_log ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read the load's log: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (rowChange, error) {
		var c rowChange
		err := row.Scan(&c.lock, &c.kind, &c.holder, &c.at)
		return c, err
	})
}
