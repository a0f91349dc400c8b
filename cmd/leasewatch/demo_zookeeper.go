package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/zookeeper"
	"github.com/leasewatch/leasewatch/collectors/zookeeper/zkserver"
)

// The demo's ZooKeeper locks: a mutex taken by the documented recipe
// (go-zookeeper's Lock) and a leader election laid out as Curator's
// LeaderLatch lays it out.
const (
	demoZooKeeperSource = "demo-zookeeper"
	demoZKLocks         = "/locks"
	demoZKReports       = demoZKLocks + "/reports"
	demoZKElections     = "/election"
	demoZKLeader        = demoZKElections + "/leader"
	demoZKSession       = 2 * time.Second
)

// startDemoZooKeeper starts a ZooKeeper server, when one is installed, and
// adds it to cfg's sources: the demo then shows ZooKeeper locks too.
// Without one it returns nil and no error.
func startDemoZooKeeper(cfg *config.Config) (*zkserver.Server, error) {
	srv, err := zkserver.Start()
	switch {
	case errors.Is(err, zkserver.ErrMissing):
		return nil, nil
	case err != nil:
		return nil, err
	}
	cfg.Sources = append(cfg.Sources, config.SourceConfig{
		Name: demoZooKeeperSource, Kind: string(zookeeper.Backend.Kind),
		Backend: &zookeeper.Section{Servers: []string{srv.Addr}, Paths: []string{demoZKLocks, demoZKElections}, ProbeSessions: true},
	})
	return srv, nil
}

// zkWorkload runs three workers on the reports mutex and three candidates
// in the leader election, each on a session of its own.
type zkWorkload struct {
	addr string
	log  *slog.Logger
}

func (w *zkWorkload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 1; i <= 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("zk-worker-%d", i)
			fn := w.reports
			if i > 3 {
				name, fn = fmt.Sprintf("zk-candidate-%d", i-3), w.candidate
			}
			for ctx.Err() == nil {
				if err := w.session(ctx, name, fn); err != nil && ctx.Err() == nil {
					w.log.Debug("zookeeper demo client", "client", name, "err", err)
					sleepCtx(ctx, 500*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// session connects as name and runs fn until ctx ends or fn fails.
func (w *zkWorkload) session(ctx context.Context, name string, fn func(context.Context, *zk.Conn, string) error) error {
	conn, _, err := zk.Connect([]string{w.addr}, demoZKSession, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, p := range []string{demoZKLocks, demoZKReports, demoZKElections, demoZKLeader} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	for ctx.Err() == nil {
		if err := fn(ctx, conn, name); err != nil {
			return err
		}
	}
	return nil
}

// reports takes the mutex by the documented recipe, holds it a moment and
// gives it up.
func (w *zkWorkload) reports(ctx context.Context, conn *zk.Conn, _ string) error {
	l := zk.NewLock(conn, demoZKReports, zk.WorldACL(zk.PermAll))
	if err := l.LockWithData([]byte("report-writer")); err != nil {
		return err
	}
	sleepCtx(ctx, time.Duration(500+mathrand.IntN(1000))*time.Millisecond)
	if err := l.Unlock(); err != nil {
		return err
	}
	sleepCtx(ctx, time.Duration(mathrand.IntN(300))*time.Millisecond)
	return nil
}

// candidate joins the election as Curator's LeaderLatch does (an ephemeral
// sequential _c_<id>-latch- node, the lowest leads), leads for a few
// seconds once it is the lowest, and steps down.
func (w *zkWorkload) candidate(ctx context.Context, conn *zk.Conn, name string) error {
	path, err := conn.Create(demoZKLeader+"/_c_"+name+"-latch-", []byte(name), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		return err
	}
	own := path[strings.LastIndexByte(path, '/')+1:]
	for ctx.Err() == nil {
		names, _, ch, err := conn.ChildrenW(demoZKLeader)
		if err != nil {
			return err
		}
		slices.SortFunc(names, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
		if len(names) > 0 && names[0] == own {
			sleepCtx(ctx, time.Duration(2000+mathrand.IntN(2000))*time.Millisecond)
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
	if err := conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	sleepCtx(ctx, time.Duration(mathrand.IntN(500))*time.Millisecond)
	return nil
}

// zkQuiet drops go-zookeeper's own log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}
