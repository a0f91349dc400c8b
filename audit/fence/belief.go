package fence

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// BelieverConfig configures a Believer. URL, Token and Source are required.
type BelieverConfig struct {
	// URL is leasewatch's base URL, such as http://127.0.0.1:8080.
	URL string
	// Token is an ingest bearer token (ingest_tokens in leasewatch's config).
	Token string
	// Source is the name of the leasewatch source of the holder's locks.
	Source string
	// Holder is the holder's name as the backend records it (an etcd lease
	// ID in hex, a Kubernetes holderIdentity, a Redis lock value), so that
	// leasewatch can tell its tenures from another holder's of the same
	// token. Empty: leasewatch goes by the token alone.
	Holder string
	// Client sends the requests. Default: a client with a 10s timeout.
	Client *http.Client
	// Logger receives the failures of Heartbeat. Default: discard.
	Logger *slog.Logger
}

// A Believer tells leasewatch what a lock holder believes: that it is
// acting under a lock's token now (POST /api/v1/beliefs). A holder that
// paused past its lease (a long GC, a stopped VM, a partition) still
// believes it holds the lock when it resumes; its first belief after the
// lease passed to someone else shows leasewatch a zombie holder before any
// of its writes does, and whether or not a resource fences them. Beliefs of
// the tenure the holder really has record nothing.
//
// Send a belief before each side effect made under the lock, or run
// Heartbeat for as long as the holder acts under a token. A Believer is safe
// for concurrent use.
type Believer struct {
	cfg      BelieverConfig
	endpoint string
	log      *slog.Logger
}

// wireBelief is one POST /api/v1/beliefs body (contract).
type wireBelief struct {
	Source string `json:"source"`
	Lock   string `json:"lock"`
	Holder string `json:"holder,omitempty"`
	Token  int64  `json:"token"`
	At     string `json:"at"`
}

// NewBeliever validates cfg and fills in defaults.
func NewBeliever(cfg BelieverConfig) (*Believer, error) {
	endpoint, err := endpointOf("BelieverConfig", cfg.URL, cfg.Token, cfg.Source, "beliefs")
	if err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: defaultHTTPTimeout}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Believer{cfg: cfg, endpoint: endpoint, log: log.With("holder", cfg.Holder)}, nil
}

// Believe tells leasewatch, once, that the holder acts under token of lock
// now, by its own clock. It returns when leasewatch has judged the belief,
// or with the error of a failed request: a belief is a heartbeat, so it is
// not retried; the next one follows.
func (b *Believer) Believe(ctx context.Context, lock string, token int64) error {
	body, err := json.Marshal(wireBelief{Source: b.cfg.Source, Lock: lock, Holder: b.cfg.Holder, Token: token,
		At: time.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return fmt.Errorf("fence: encode belief: %w", err)
	}
	status, _, msg, err := postJSON(ctx, b.cfg.Client, b.endpoint, b.cfg.Token, body)
	switch {
	case err != nil:
		return fmt.Errorf("fence: send belief: %w", err)
	case status < 200 || status >= 300:
		return fmt.Errorf("fence: leasewatch refused the belief: %d %s", status, msg)
	}
	return nil
}

// Heartbeat sends a belief in token of lock now and every interval until
// ctx ends; cancel ctx when the holder stops acting under the token (it
// released the lock, or learned that it lost it). Failures are logged and
// the heartbeat goes on. A holder paused for longer than interval sends its
// next belief as soon as it resumes, which is when it matters.
func (b *Believer) Heartbeat(ctx context.Context, interval time.Duration, lock string, token int64) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := b.Believe(ctx, lock, token); err != nil && ctx.Err() == nil {
			b.log.Warn("fence: belief not delivered", "lock", lock, "token", token, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
