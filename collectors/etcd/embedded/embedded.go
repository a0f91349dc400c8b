// Package embedded runs an in-process, single-member etcd server on loopback:
// the backend of `leasewatch demo` and of the etcd collector's tests.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is a running embedded etcd.
type Server struct {
	etcd *embed.Etcd
	// Endpoint is the client URL, e.g. http://127.0.0.1:41234.
	Endpoint string
}

// Options tunes the server. The zero value is fine for most uses.
type Options struct {
	// ProgressNotifyInterval is how often idle watches get progress
	// notifications (etcd's default is 10 minutes).
	ProgressNotifyInterval time.Duration
	// Logger receives etcd's own logs; nil discards them (a stopping server
	// logs its closed listeners as errors).
	Logger *zap.Logger
	// TLS, when set, serves clients over TLS (Endpoint is https://).
	TLS *TLS
	// BcryptCost is the cost of the password hashes of etcd's auth users
	// (etcd's default, 10, when zero). Tests lower it: under the race
	// detector each hash or check at cost 10 takes seconds.
	BcryptCost uint
}

// TLS is the server side of client TLS, as PEM files.
type TLS struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes etcd require a client certificate
	// signed by one of its CAs (--client-cert-auth --trusted-ca-file).
	ClientCAFile string
}

// Start runs an etcd server with its data in dir and waits until it serves.
// Ports are picked free on 127.0.0.1; a port taken between picking and
// binding is retried.
func Start(ctx context.Context, dir string, opts Options) (*Server, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(ctx, dir, opts)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("start embedded etcd: %w", lastErr)
}

func start(ctx context.Context, dir string, opts Options) (*Server, error) {
	clientScheme := "http"
	if opts.TLS != nil {
		clientScheme = "https"
	}
	clientURL, err := freeURL(clientScheme)
	if err != nil {
		return nil, err
	}
	peerURL, err := freeURL("http")
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "leasewatch"
	cfg.Dir = dir
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.ProgressNotifyInterval > 0 {
		cfg.WatchProgressNotifyInterval = opts.ProgressNotifyInterval
	}
	if t := opts.TLS; t != nil {
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = t.CertFile, t.KeyFile
		if t.ClientCAFile != "" {
			cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = t.ClientCAFile, true
		}
	}
	if opts.BcryptCost > 0 {
		cfg.BcryptCost = opts.BcryptCost
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("etcd took more than 60s to become ready")
	}
	return &Server{etcd: e, Endpoint: clientURL.String()}, nil
}

// Close stops the server.
func (s *Server) Close() { s.etcd.Close() }

func freeURL(scheme string) (*url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pick a free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return nil, err
	}
	return &url.URL{Scheme: scheme, Host: addr}, nil
}
