package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	k8s "k8s.io/client-go/kubernetes"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/ownership"
)

// replicas is a replica's part in sharing the sources (replication:): the
// elector on the configured backend, and the manager that runs a source's
// collector while this replica owns it, its commits fenced with the grant's
// token.
type replicas struct {
	el      ownership.Elector
	manager *ownership.Manager
	rec     *audit.Recorder
	runner  *collectors.Runner
	alerts  *alert.Keeper // evaluates the sources this replica owns
	log     *slog.Logger

	mu      sync.Mutex
	pending []grant         // grants and ends not yet acted on, in order
	wake    chan struct{}   // signalled when pending grows
	owned   map[string]bool // the sources whose grants were acted on and not ended
}

// owns reports whether this replica records source now.
func (r *replicas) owns(source string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owned[source]
}

// setOwned notes that this replica records source now, or no longer.
func (r *replicas) setOwned(source string, owned bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if owned {
		r.owned[source] = true
	} else {
		delete(r.owned, source)
	}
}

// grant is the start (token set) or the end of an ownership.
type grant struct {
	source string
	token  int64
	ended  bool
	done   chan struct{} // of an end: closed once the source is given up
}

// replicaSyncEvery is how often a replica writes its sources' renewals into
// the lock and tenure rows. Other replicas serve those sources from the rows
// alone (the renewals held back live in the owner's memory), and a page on
// any replica is to show the owner's state within a second. Heartbeats,
// most of a fleet's renewals, renew every 10 s or so: each is written once
// per renewal at any interval under that, so the shorter interval costs
// only for locks that renew faster.
const replicaSyncEvery = 500 * time.Millisecond

// newReplicas connects to the replication backend and returns the manager
// of cfg's sources on runner, which must be gated.
func newReplicas(ctx context.Context, cfg config.ReplicationConfig, sources []string, rec *audit.Recorder, runner *collectors.Runner, logger *slog.Logger) (*replicas, error) {
	el, err := newElector(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	r := &replicas{el: el, rec: rec, runner: runner, log: logger.With("component", "replication", "identity", cfg.Identity),
		wake: make(chan struct{}, 1), owned: make(map[string]bool)}
	r.manager = ownership.NewManager(el, ownership.ManagerConfig{
		Sources:     sources,
		RetryPeriod: cfg.Timing().RetryPeriod,
		// The manager's callbacks must not block: the fence is a commit,
		// so they queue the grant for run, which acts on each in order.
		OnAcquired: func(source string, token int64) { r.queue(grant{source: source, token: token}) },
		OnLost: func(source string) {
			runner.Disown(source) // at once, before anything else
			r.alerts.Lose(source) // before DropFence forgets the locks
			// The manager resigns once this returns: the source's last
			// write (Recorder.DropFence) goes first, so that a clean
			// handover is not refused by the next owner's fence.
			done := make(chan struct{})
			r.queue(grant{source: source, ended: true, done: done})
			select {
			case <-done:
			case <-time.After(cfg.Timing().RenewDeadline):
			}
		},
		Logger: r.log,
	})
	return r, nil
}

func (r *replicas) queue(g grant) {
	r.mu.Lock()
	r.pending = append(r.pending, g)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// act acts on the queued grants in order until ctx ends. A grant first
// writes its token to the store's fence, which cuts the previous owner's
// commits off, and only then starts the collector; an end stops the
// collector and gives the source up in the recorder.
func (r *replicas) act(ctx context.Context) {
	for {
		r.mu.Lock()
		gs := r.pending
		r.pending = nil
		r.mu.Unlock()
		for _, g := range gs {
			if g.ended {
				r.runner.Disown(g.source)
				r.setOwned(g.source, false)
				if err := r.rec.DropFence(ctx, g.source); err != nil && ctx.Err() == nil {
					r.log.Error("give a lost source up", "source", g.source, "err", err)
				}
				r.log.Warn("source lost: its collector is stopped", "source", g.source)
				close(g.done)
				continue
			}
			if err := r.rec.SetFence(ctx, g.source, g.token); err != nil {
				if ctx.Err() == nil {
					r.log.Error("source granted, but its fence could not be set: not started", "source", g.source, "token", g.token, "err", err)
				}
				continue
			}
			r.alerts.Gain(g.source)
			r.runner.Own(g.source)
			r.setOwned(g.source, true)
			r.log.Info("source acquired: collector starting", "source", g.source, "token", g.token)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}

// refused stops a source whose commit the store refused: a newer owner
// holds it, whatever this replica's lease says.
func (r *replicas) refused(f audit.FenceRefusal) {
	r.alerts.Lose(f.Source)
	r.runner.Disown(f.Source)
	r.setOwned(f.Source, false)
	r.log.Error("commit refused by the store's fence: a newer owner holds the source; its collector is stopped",
		"source", f.Source, "token", f.Token, "highest", f.Highest)
}

// newElector connects to the backend replicas elect owners on.
func newElector(ctx context.Context, cfg config.ReplicationConfig) (ownership.Elector, error) {
	switch cfg.Backend {
	case config.ReplicationEtcd:
		src := cfg.EtcdSource()
		tlsConfig, err := src.TLS.ClientConfig(slog.Default())
		if err != nil {
			return nil, fmt.Errorf("tls.%w", err)
		}
		cli, err := etcd.Dial(ctx, etcd.Config{Name: src.Name, Endpoints: cfg.Endpoints, Prefixes: []string{cfg.Prefix},
			Username: src.Username, Password: src.Secret(), TLS: tlsConfig})
		if err != nil {
			return nil, err
		}
		el, err := ownership.NewEtcdElector(ctx, cli, ownership.EtcdConfig{Identity: cfg.Identity, Prefix: cfg.Prefix, Timing: cfg.Timing()})
		if err != nil {
			cli.Close()
			return nil, err
		}
		return closing{el, cli.Close}, nil
	case config.ReplicationKubernetes:
		rc, err := kubernetes.LoadRESTConfig(cfg.Kubeconfig, cfg.Context)
		if err != nil {
			return nil, err
		}
		cs, err := k8s.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		return ownership.NewKubernetesElector(cs, ownership.KubernetesConfig{Identity: cfg.Identity, Namespace: cfg.Namespace, Timing: cfg.Timing()})
	}
	return nil, fmt.Errorf("backend: %q is not one replicas elect owners on", cfg.Backend)
}

// closing is an elector that also closes the client it owns.
type closing struct {
	ownership.Elector
	client func() error
}

func (c closing) Close() error {
	err := c.Elector.Close()
	if cerr := c.client(); err == nil {
		err = cerr
	}
	return err
}

// run shares the sources until ctx ends, then resigns them and closes the
// elector.
func (r *replicas) run(ctx context.Context) {
	var wg sync.WaitGroup
	// The manager gives every source up as it stops (OnLost): the ends
	// are acted on until it has.
	actCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { r.act(actCtx) })
	r.manager.Run(ctx)
	stop()
	r.el.Close()
	wg.Wait()
}
