package main

import (
	"context"
	"fmt"
	"log/slog"

	k8s "k8s.io/client-go/kubernetes"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/ownership"
)

// replicas is a replica's part in sharing the sources (replication:): the
// elector on the configured backend, and the manager that runs a source's
// collector while this replica owns it.
type replicas struct {
	el      ownership.Elector
	manager *ownership.Manager
}

// newReplicas connects to the replication backend and returns the manager
// of cfg's sources on runner, which must be gated. A grant starts the
// source's collector; its end stops it at once.
func newReplicas(ctx context.Context, cfg config.ReplicationConfig, sources []string, runner *collectors.Runner, logger *slog.Logger) (*replicas, error) {
	el, err := newElector(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication: %w", err)
	}
	log := logger.With("component", "replication", "identity", cfg.Identity)
	m := ownership.NewManager(el, ownership.ManagerConfig{
		Sources:     sources,
		RetryPeriod: cfg.Timing().RetryPeriod,
		OnAcquired: func(source string, token int64) {
			log.Info("source acquired", "source", source, "token", token)
			runner.Own(source)
		},
		OnLost: func(source string) {
			runner.Disown(source)
			log.Warn("source lost: its collector is stopped", "source", source)
		},
		Logger: log,
	})
	return &replicas{el: el, manager: m}, nil
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
		cli, err := etcd.Dial(ctx, etcd.Config{Name: src.Name, Endpoints: src.Endpoints, Prefixes: []string{cfg.Prefix},
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
	r.manager.Run(ctx)
	r.el.Close()
}
