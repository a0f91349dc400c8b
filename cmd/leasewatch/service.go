package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/prom"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/backends"
	"github.com/leasewatch/leasewatch/web"
)

// service is leasewatch wired together: store, recorder, collectors and web.
// It is the only place that knows every concrete type.
type service struct {
	cfg      *config.Config
	store    audit.Database
	recorder *audit.Recorder
	runner   *collectors.Runner
	replicas *replicas // nil without replication
	alerts   *alert.Keeper
	sender   *alert.Sender // nil without alerts.alertmanager.urls
	retainer *audit.Retainer
	verdicts *verdict.Keeper
	clocks   *audit.HolderClocks // the holders' clocks, kept by the tracker
	web      *web.Server
	ln       net.Listener
	log      *slog.Logger
}

// startService opens the database, restores the tracker, builds the
// collectors and binds the listener.
func startService(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*service, error) {
	store, err := openDatabase(ctx, cfg, forServing, logger)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}))
	rm := prom.NewRecorderMetrics(reg, cfg.Metrics.ResourceSeries())
	rm.StartSources(cfg.SourceKinds())
	svc := &service{cfg: cfg, store: store, log: logger, clocks: audit.NewHolderClocks(0)}
	sources := func() []audit.Source { return rm.WithLag(svc.runner.Sources()) }
	if svc.alerts, svc.sender, err = newAlerts(cfg, sources, reg, logger); err != nil {
		store.Close()
		return nil, err
	}
	svc.verdicts = &verdict.Keeper{Store: backgroundReads(store), Put: store.PutVerdicts, Purposes: cfg.VerdictPurposes(), Now: time.Now,
		Log: logger.With("component", "verdicts")}
	opts := []audit.RecorderOption{audit.WithCommitInterval(cfg.CommitInterval), audit.WithSubscribers(rm, svc.alerts, svc.verdicts),
		audit.WithFenceRefused(func(f audit.FenceRefusal) {
			if svc.replicas != nil {
				svc.replicas.refused(f)
			}
		})}
	if cfg.Replication.Enabled() {
		// Each source is loaded when this replica is granted it, and its
		// renewals reach the rows that other replicas read soon enough.
		// A commit the fence refuses shows on leasewatch's own locks.
		r := cfg.Replication
		opts = append(opts, audit.WithOwnership(), audit.WithSyncInterval(replicaSyncEvery), audit.WithHeartbeatSyncInterval(replicaSyncEvery),
			audit.WithOwnLocks(audit.OwnLocks{Source: r.Source, Lock: r.OwnLock, Replica: r.Identity}))
	}
	health := cfg.Health.Tracker()
	health.Clocks = svc.clocks
	rec := audit.NewRecorder(rm.TimeCommits(store), audit.TrackerConfig{
		RenewMarginRatio: cfg.Alerts.RenewMarginRatio,
		SourceKinds:      cfg.SourceKinds(),
		Health:           health,
	}, logger.With("component", "recorder"), opts...)
	if err := rec.Start(ctx); err != nil {
		store.Close()
		return nil, err
	}
	svc.recorder = rec
	if err := svc.alerts.Follow(ctx, rec.Peek, rec.Fresh(store)); err != nil {
		svc.close()
		return nil, fmt.Errorf("load locks for alerting: %w", err)
	}

	if err := svc.startCollectors(ctx, reg); err != nil {
		svc.close()
		return nil, err
	}
	reg.MustRegister(rm.LeaseCollector(rec.Fresh(store), svc.runner.Sources, cfg.Metrics.LockSeries(), logger.With("component", "metrics")),
		prom.NewVerdictCollector(backgroundReads(store), logger.With("component", "metrics")),
		prom.NewClockCollector(svc.clocks, prom.DefaultClockSeries, logger.With("component", "metrics")))
	pruned, sealed := prom.RegisterRetention(reg, store)
	svc.retainer = &audit.Retainer{Store: store, Sealer: store, Retention: cfg.Retention.Policy(), Now: time.Now,
		Log: logger.With("component", "retention"), Pruned: pruned, Sealed: sealed}
	if svc.replicas != nil {
		// One replica prunes: the owner of leasewatch's own source. Each
		// keeps the verdicts of the sources it owns.
		own := cfg.Replication.Source
		svc.retainer.Active = func() bool { return svc.replicas.owns(own) }
		svc.verdicts.Owns = svc.replicas.owns
	}
	if err := svc.startWeb(sources, reg); err != nil {
		svc.close()
		return nil, err
	}
	return svc, nil
}

// newAlerts builds the alerts' keeper over the collectors' states from
// sources, and the Alertmanager sender it notifies if one is configured,
// its metrics in reg.
func newAlerts(cfg *config.Config, sources func() []audit.Source, reg prometheus.Registerer, logger *slog.Logger) (*alert.Keeper, *alert.Sender, error) {
	sender, err := newAlertSender(cfg.Alerts.Alertmanager, logger.With("component", "alertmanager"), reg)
	if err != nil {
		return nil, nil, err
	}
	var notify func([]alert.Alert)
	if sender != nil {
		notify = sender.Send
	}
	keeper := alert.NewKeeper(cfg.Alerts.Alert(), alert.KeeperConfig{Sources: sources, ByClock: expiringByClock(cfg.Sources),
		Notify: notify, ResendEvery: cfg.Alerts.Alertmanager.ResendEvery})
	if cfg.Replication.Enabled() {
		keeper.OwnSourcesOnly(logger.With("component", "alerting"))
	}
	return keeper, sender, nil
}

// expiringByClock returns the sources whose leases run out by the clock
// (collectors.Backend.ExpiresByClockFor): their backends never report an
// expiry themselves, or, as a PostgreSQL source's lease tables, not all.
func expiringByClock(sources []config.SourceConfig) []string {
	var out []string
	for _, src := range sources {
		if b, ok := backends.Of(audit.SourceKind(src.Kind)); ok && b.ExpiresByClockFor(src.Backend) {
			out = append(out, src.Name)
		}
	}
	return out
}

// newAlertSender builds the Alertmanager sender of am, its metrics in reg;
// nil when no Alertmanager is configured.
func newAlertSender(am config.AlertmanagerConfig, log *slog.Logger, reg prometheus.Registerer) (*alert.Sender, error) {
	if !am.Enabled() {
		return nil, nil
	}
	sc, err := am.SenderConfig(log)
	if err != nil {
		return nil, fmt.Errorf("alerts.alertmanager: %w", err)
	}
	sc.Logger = log
	sender, err := alert.NewSender(sc)
	if err != nil {
		return nil, fmt.Errorf("alerts.alertmanager: %w", err)
	}
	prom.RegisterSender(reg, sender)
	return sender, nil
}

// startCollectors builds a collector per source and their runner, and with
// replication the replicas' share of them.
func (s *service) startCollectors(ctx context.Context, reg prometheus.Registerer) error {
	cfg := s.cfg
	var cs []collectors.Collector
	for i, sc := range cfg.Sources {
		c, err := sc.Collector(s.log.With("source", sc.Name))
		if err != nil {
			return fmt.Errorf("sources[%d]: %w", i, err)
		}
		cs = append(cs, c)
	}
	var err error
	s.runner, err = collectors.NewRunner(s.recorder, cs, collectors.RunnerConfig{Logger: s.log.With("component", "collectors"),
		Registerer: reg, Gated: cfg.Replication.Enabled()})
	if err != nil || !cfg.Replication.Enabled() {
		return err
	}
	names := make([]string, len(cfg.Sources))
	for i, sc := range cfg.Sources {
		names[i] = sc.Name
	}
	if s.replicas, err = newReplicas(ctx, cfg.Replication, names, s.recorder, s.runner, s.log); err == nil {
		s.replicas.alerts = s.alerts
	}
	return err
}

// startWeb builds the web server on the recorder's fresh reads and binds
// its listener.
func (s *service) startWeb(sources func() []audit.Source, reg *prometheus.Registry) error {
	cfg := s.cfg
	webLog := s.log.With("component", "web")
	var tlsConfig *tls.Config
	if cfg.TLS.Enabled() {
		var err error
		if tlsConfig, err = cfg.TLS.ServerConfig(webLog); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	var err error
	s.web, err = web.New(web.Config{
		Store:            s.recorder.Fresh(s.store),
		Writes:           s.recorder,
		Sources:          sources,
		Alerts:           s.alerts.Alerts,
		KnownSources:     cfg.SourceKinds(),
		Kinds:            backends.Kinds(),
		IngestTokens:     cfg.IngestTokens,
		Registry:         reg,
		Logger:           webLog,
		Ready:            s.recorder.Ready,
		RenewMarginRatio: cfg.Alerts.RenewMarginRatio,
		Auth:             webAuth(cfg.Auth, cfg.DashboardHosts()),
		TLS:              tlsConfig,
		Purposes:         cfg.VerdictPurposes(),
		Clocks:           s.clocks,

		GroupExposuresUnder: cfg.Dashboard.GroupExposuresUnder,
	})
	if err != nil {
		return err
	}
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	return nil
}

// webAuth translates auth: for the web server. An open dashboard answers
// only the hosts it is reached by (config.DashboardHosts), against DNS
// rebinding.
func webAuth(a config.AuthConfig, hosts []string) web.Auth {
	var wa web.Auth
	switch a.Mode {
	case config.AuthBasic:
		wa.Users, wa.Realm = a.Users, a.Realm
	case config.AuthProxy:
		wa.ProxyHeader, wa.TrustedProxies = a.ProxyHeader, a.Proxies()
	default:
		// Open; validation refuses protect_* without a mode.
		return web.Auth{CheckHost: true, Hosts: hosts}
	}
	wa.ProtectMetrics, wa.ProtectHealth = a.ProtectMetrics, a.ProtectHealth
	return wa
}

// URL is the base URL the service listens on.
func (s *service) URL() string {
	if s.cfg.TLS.Enabled() {
		return "https://" + s.ln.Addr().String()
	}
	return "http://" + s.ln.Addr().String()
}

// serve runs collectors and the web server until ctx ends, then shuts down
// in order: stop taking requests, stop collectors, drain the recorder, close
// the database. With replication the sources are handed over as soon as ctx
// ends, while the requests in flight drain: another replica takes them at
// once, and a report in flight for one of them is refused as retryable
// rather than waiting for this replica's web server to finish.
func (s *service) serve(ctx context.Context) error {
	s.log.Info("leasewatch listening", "url", s.URL(), "database", s.cfg.DatabaseName(), "sources", len(s.cfg.Sources),
		"auth", s.cfg.Auth.Mode)
	if s.cfg.Auth.Mode == config.AuthBasic && !s.cfg.TLS.Enabled() {
		s.log.Warn("auth mode basic without tls: passwords cross the network in the clear unless a proxy in front terminates TLS")
	}
	var wg sync.WaitGroup
	collectCtx, stopCollectors := context.WithCancel(context.Background())
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.runner.Run(collectCtx)
	}()
	go func() {
		defer wg.Done()
		s.alerts.Run(collectCtx)
	}()
	if s.sender != nil {
		wg.Go(func() { _ = s.sender.Run(collectCtx) })
	}
	wg.Go(func() { s.retainer.Run(collectCtx) })
	wg.Go(func() { _ = s.verdicts.Run(collectCtx) })
	if s.replicas != nil {
		wg.Go(func() { s.replicas.run(ctx) })
	}
	err := s.web.Serve(ctx, s.ln)
	stopCollectors()
	wg.Wait()
	s.close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// waitUp waits until every collector has reported its first snapshot (with
// replication, every collector of a source this replica owns).
func (s *service) waitUp(ctx context.Context) error {
	for {
		up := true
		for _, src := range s.runner.Sources() {
			up = up && (src.State == audit.SourceUp || src.State == audit.SourceStandby)
		}
		if up {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *service) close() {
	if s.recorder != nil {
		s.recorder.Close()
	}
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			s.log.Error("close database", "err", err)
		}
	}
}
