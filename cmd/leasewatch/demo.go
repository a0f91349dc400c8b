package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/audit/fence"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
	"github.com/leasewatch/leasewatch/collectors/redis"
	"github.com/leasewatch/leasewatch/collectors/redis/redisserver"
)

const demoSource = "demo-etcd"

// cmdDemo runs the embedded default: an in-process etcd in a temporary
// directory, real etcd lock clients contending for mutexes and an election,
// fenced and unfenced demo resources reporting their writes, and the full
// service against it all.
func cmdDemo(ctx context.Context, args []string, logger *slog.Logger, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	listen := fs.String("listen", config.DefaultListen, "address for the dashboard and API")
	keep := fs.Bool("keep", false, "keep the demo's data directory when it exits")
	alertmanager := fs.String("alertmanager", "", "send the live alerts to the Alertmanager at this URL")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if _, _, err := config.SplitHostPort(*listen); err != nil {
		return usageError{fmt.Errorf("--listen: %w", err)}
	}

	dir, err := os.MkdirTemp("", "leasewatch-demo-")
	if err != nil {
		return err
	}
	if *keep {
		logger.Info("demo data kept", "dir", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	server, err := embedded.Start(ctx, filepath.Join(dir, "etcd"), embedded.Options{ProgressNotifyInterval: 2 * time.Second})
	if err != nil {
		return err
	}
	defer server.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{server.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to the demo etcd: %w", err)
	}
	defer cli.Close()

	token := randomToken()
	cfg := demoConfig(*listen, dir, server.Endpoint, token, *alertmanager)
	extras, err := startDemoExtras(ctx, dir, cfg)
	if err != nil {
		return err
	}
	defer extras.close()
	if err := cfg.Validate(); err != nil {
		return err
	}
	svc, err := startService(ctx, cfg, logger)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- svc.serve(ctx) }()
	if err := svc.waitUp(ctx); err != nil {
		return <-served
	}

	fmt.Fprintf(stdout, `
leasewatch demo is running: open %s

  etcd (in-process):  %s, locks under /locks/ and /election/
  redis-server:       %s
  zookeeper:          %s
  postgresql:         %s
  workload:           7 real etcd lock clients; worker-1 pauses past its lease
                      and its late write is rejected by the fenced "ledger"
                      resource (and now and then accepted by the unfenced "cache")
  ingest token:       %s
  data:               %s

Press Ctrl-C to stop.
`, svc.URL(), server.Endpoint, extras.redisNote, extras.zkNote, extras.pgNote, token, dir)

	stop, err := startDemoWorkloads(ctx, svc.URL(), token, cli, dir, extras, logger)
	if err != nil {
		return err
	}
	err = <-served
	stop()
	return err
}

// demoConfig is the demo service's configuration: its database in dir, the
// embedded etcd at endpoint as its source, token to ingest with, and the
// Alertmanager at alertmanager ("" for none) to alert.
func demoConfig(listen, dir, endpoint, token, alertmanager string) *config.Config {
	cfg := &config.Config{
		Listen:       listen,
		Database:     filepath.Join(dir, "leasewatch.db"),
		IngestTokens: []string{token},
		Sources: []config.SourceConfig{{
			Name: demoSource, Kind: string(etcd.Backend.Kind),
			Backend: &etcd.Section{Endpoints: []string{endpoint}, Prefixes: []string{"/locks/", "/election/"}},
		}},
		// The demo's locks and writes are its own, made up for the tour:
		// it may be opened on a network address (a container, a VM).
		Auth: config.AuthConfig{AllowOpen: true},
	}
	if alertmanager != "" {
		cfg.Alerts.Alertmanager.URLs = []string{alertmanager}
	}
	cfg.SetDefaults()
	return cfg
}

// demoExtras are the demo's optional backends, each started where its
// server is installed, with the line the banner shows of it.
type demoExtras struct {
	redisAddr, redisNote string // redisAddr "": not installed
	zkAddr, zkNote       string // zkAddr "": not installed
	pgURL, pgNote        string // pgURL "": not installed
	closers              []func()
}

// startDemoExtras starts a redis-server, a ZooKeeper server and a
// PostgreSQL server where they are installed, adding them to cfg's sources.
func startDemoExtras(ctx context.Context, dir string, cfg *config.Config) (*demoExtras, error) {
	x := &demoExtras{
		redisNote: "not on PATH: install Debian's redis-server to see Redis locks too",
		zkNote:    "not installed: install Debian's zookeeper to see ZooKeeper locks too",
		pgNote:    "not installed: install Debian's postgresql to see PostgreSQL locks too",
	}
	redisSrv, err := startDemoRedis(ctx, dir, cfg)
	if err != nil {
		return nil, err
	}
	if redisSrv != nil {
		x.closers = append(x.closers, redisSrv.Stop)
		x.redisAddr = redisSrv.Addr
		x.redisNote = redisSrv.Addr + ": redsync mutexes on lock:jobs (no token) and fenced lock:payments"
	}
	zkSrv, err := startDemoZooKeeper(cfg)
	if err != nil {
		x.close()
		return nil, err
	}
	if zkSrv != nil {
		x.closers = append(x.closers, zkSrv.Close)
		x.zkAddr = zkSrv.Addr
		x.zkNote = zkSrv.Addr + ": the lock recipe on /locks/reports, a LeaderLatch on /election/leader"
	}
	pgSrv, err := startDemoPostgres(ctx, cfg)
	if err != nil {
		x.close()
		return nil, err
	}
	if pgSrv != nil {
		x.closers = append(x.closers, func() { _ = pgSrv.Stop() })
		x.pgURL = pgSrv.URL(demoPGDatabase)
		x.pgNote = fmt.Sprintf("%s: an advisory lock (%s/%d) two workers take turns on, ShedLock's table streamed",
			pgSrv.Addr, demoPGDatabase, demoPGAdvisoryKey)
	}
	return x, nil
}

// close stops the servers started.
func (x *demoExtras) close() {
	for _, f := range x.closers {
		f()
	}
}

// startDemoRedis starts a redis-server in dir, when one is installed, and adds it
// to cfg's sources: the demo then shows Redis locks too. Without one it
// returns nil and no error.
func startDemoRedis(ctx context.Context, dir string, cfg *config.Config) (*redisserver.Server, error) {
	srv, err := redisserver.Start(ctx, filepath.Join(dir, "redis"))
	switch {
	case errors.Is(err, redisserver.ErrNotInstalled):
		return nil, nil
	case err != nil:
		return nil, err
	}
	cfg.Sources = append(cfg.Sources, config.SourceConfig{
		Name: demoRedisSource, Kind: string(redis.Backend.Kind), Backend: &redis.Section{
			Addr: srv.Addr, Patterns: []string{"lock:*"},
			Token: &redis.TokenRule{ValuePattern: `^(?P<token>\d+):(?P<holder>.+)$`},
		},
	})
	return srv, nil
}

// startDemoWorkloads starts the demo's traffic against the service at base:
// the etcd workload, with its resources reporting their writes and its
// paused worker its beliefs, and one on each of x's servers. stop waits
// for them to end with ctx and closes their reporters.
func startDemoWorkloads(ctx context.Context, base, token string, cli *clientv3.Client, dir string, x *demoExtras, logger *slog.Logger) (stop func(), err error) {
	var reporters []*fence.Reporter
	newReporter := func(source, resource string) *fence.Reporter {
		r, err := fence.NewReporter(fence.Config{URL: base, Token: token, Source: source, Resource: resource, FlushInterval: 100 * time.Millisecond, Logger: logger})
		if err != nil {
			panic(err) // the configuration above is fixed and valid
		}
		reporters = append(reporters, r)
		return r
	}
	w, err := newWorkload(cli, filepath.Join(dir, "resources.db"), newReporter(demoSource, "ledger"), newReporter(demoSource, "cache"),
		fence.BelieverConfig{URL: base, Token: token, Source: demoSource, Logger: logger}, logger)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	start := func(run func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	start(w.run)
	if x.redisAddr != "" {
		start(newRedisWorkload(x.redisAddr, newReporter(demoRedisSource, "payments"), logger).run)
	}
	if x.zkAddr != "" {
		start((&zkWorkload{addr: x.zkAddr, log: logger}).run)
	}
	if x.pgURL != "" {
		start((&pgWorkload{url: x.pgURL, log: logger}).run)
	}
	return func() {
		wg.Wait()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for _, r := range reporters {
			_ = r.Close(closeCtx) // the service is gone: what is left cannot be delivered
		}
	}, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
