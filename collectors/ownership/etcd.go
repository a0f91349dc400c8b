package ownership

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultEtcdPrefix is where EtcdElector keeps its keys by default.
const DefaultEtcdPrefix = "/leasewatch/ownership/"

// EtcdConfig configures an EtcdElector.
type EtcdConfig struct {
	// Identity names this replica; it is the value of its election keys.
	Identity string
	// Prefix is the key prefix of the members and the elections, ending in
	// '/'. Default DefaultEtcdPrefix.
	Prefix string
	Timing Timing
}

// EtcdElector elects owners with etcd's concurrency package: one Session
// (a lease of LeaseDuration) per replica, which holds its membership key
// PREFIX/members/IDENTITY/LEASE and its leader keys, and one
// concurrency.Election per source under PREFIX/sources/SOURCE/.
//
// The token is the leader key's CreateRevision (Election.Rev): etcd's
// revision rises with every write, and an election grants the key with the
// lowest CreateRevision among those present, so each grant's key was
// created after every earlier leader's and its revision is larger.
//
// The session's own keep-alive renews the lease, but it reports a failure
// only once the lease has expired on the server. So the elector also
// renews it itself every RetryPeriod and gives the session up when no
// renewal has succeeded for RenewDeadline, counted from when the renewal
// was sent: the server cannot have expired the lease yet, and nobody else
// can have been granted its sources.
type EtcdElector struct {
	cli    *clientv3.Client
	cfg    EtcdConfig
	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	mu      sync.Mutex
	session *etcdSession
}

var _ Elector = (*EtcdElector)(nil)

// etcdSession is one lease of the replica, and what it holds.
type etcdSession struct {
	cs   *concurrency.Session
	lost chan struct{} // closed when the lease is given up
	once sync.Once
}

func (s *etcdSession) lose() { s.once.Do(func() { close(s.lost) }) }

// NewEtcdElector returns an elector on cli, which the caller owns and
// closes after Close. It announces the replica at once.
func NewEtcdElector(ctx context.Context, cli *clientv3.Client, cfg EtcdConfig) (*EtcdElector, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultEtcdPrefix
	}
	cfg.Timing = cfg.Timing.WithDefaults()
	switch {
	case strings.TrimSpace(cfg.Identity) == "":
		return nil, errors.New("identity: required")
	case !strings.HasSuffix(cfg.Prefix, "/"):
		return nil, fmt.Errorf("prefix: %q must end in '/'", cfg.Prefix)
	}
	if err := cfg.Timing.Validate(); err != nil {
		return nil, err
	}
	e := &EtcdElector{cli: cli, cfg: cfg}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if _, err := e.currentSession(ctx); err != nil {
		e.cancel()
		return nil, err
	}
	return e, nil
}

// Identity is the replica's identity.
func (e *EtcdElector) Identity() string { return e.cfg.Identity }

// currentSession returns the live session, starting a new one (and
// announcing the replica under it) when there is none.
func (e *EtcdElector) currentSession(ctx context.Context) (*etcdSession, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil {
		return nil, errClosed
	}
	if s := e.session; s != nil {
		select {
		case <-s.lost:
		default:
			return s, nil
		}
	}
	ttl := int64(e.cfg.Timing.LeaseDuration / time.Second)
	sent := time.Now()
	grant, err := e.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant the replica's lease: %w", err)
	}
	cs, err := concurrency.NewSession(e.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(e.ctx))
	if err != nil {
		return nil, fmt.Errorf("start the replica's session: %w", err)
	}
	member := fmt.Sprintf("%smembers/%s/%x", e.cfg.Prefix, url.PathEscape(e.cfg.Identity), grant.ID)
	if _, err := e.cli.Put(ctx, member, e.cfg.Identity, clientv3.WithLease(grant.ID)); err != nil {
		e.abandon(cs)
		return nil, fmt.Errorf("announce the replica: %w", err)
	}
	s := &etcdSession{cs: cs, lost: make(chan struct{})}
	e.session = s
	go e.renew(s, sent)
	return s, nil
}

// renew renews s's lease every RetryPeriod and gives s up once no renewal
// has succeeded for RenewDeadline since it was sent.
func (e *EtcdElector) renew(s *etcdSession, last time.Time) {
	t := e.cfg.Timing
	defer func() {
		s.lose()
		e.abandon(s.cs)
	}()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-s.cs.Done():
			return // the lease is gone on the server
		case <-time.After(t.RetryPeriod):
		}
		left := time.Until(last.Add(t.RenewDeadline))
		if left <= 0 {
			return
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(e.ctx, left)
		_, err := e.cli.KeepAliveOnce(ctx, s.cs.Lease())
		cancel()
		switch {
		case err == nil:
			last = sent
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return
		}
	}
}

// abandon stops renewing cs's lease and, best effort, revokes it, which
// hands its sources over at once when etcd can be reached.
func (e *EtcdElector) abandon(cs *concurrency.Session) {
	cs.Orphan()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timing.RenewDeadline)
		defer cancel()
		_, _ = e.cli.Revoke(ctx, cs.Lease())
	}()
}

// Members counts the identities with a membership key, one per live
// session. A replica restarted under its identity counts once, though its
// previous process's key stays until that lease runs out: counted twice,
// the others would shrink their shares and hand sources over for nothing.
func (e *EtcdElector) Members(ctx context.Context) (n, rank int, err error) {
	prefix := e.cfg.Prefix + "members/"
	resp, err := e.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("count the replicas: %w", err)
	}
	self := url.PathEscape(e.cfg.Identity)
	ids := map[string]bool{self: true}
	for _, kv := range resp.Kvs {
		// PREFIX/members/IDENTITY/LEASE, IDENTITY path-escaped.
		id, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if !ids[id] && id < self {
			rank++
		}
		ids[id] = true
	}
	return len(ids), rank, nil
}

// sourcePrefix is the election prefix of source: escaped, so that no
// source's keys lie under another's.
func (e *EtcdElector) sourcePrefix(source string) string { return EtcdSourceLock(e.cfg.Prefix, source) }

// EtcdSourcesPrefix is where the elections of every source lie under
// prefix: an etcd source watching it records each source's ownership as a
// lock (docs/ha.md, "leasewatch's own locks").
func EtcdSourcesPrefix(prefix string) string { return prefix + "sources/" }

// EtcdSourceLock is the lock an etcd source watching EtcdSourcesPrefix
// records source's ownership election as. It ends in '/': the election's
// prefix, under which concurrency.Election writes its candidates' keys
// after one more '/'.
func EtcdSourceLock(prefix, source string) string {
	return EtcdSourcesPrefix(prefix) + url.PathEscape(source) + "/"
}

// Campaign tries every RetryPeriod, and at once when a key of the election
// is deleted (its leader resigned, or its lease ran out): once the election
// has no leader and allow agrees, it campaigns, which grants at once
// unless another replica campaigned first (then it waits behind it, as
// etcd's elections do). etcd expires a dead holder's lease itself, so
// takeover is always false.
func (e *EtcdElector) Campaign(ctx context.Context, source string, allow func(takeover bool) bool) (*Term, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	deleted := e.cli.Watch(wctx, e.sourcePrefix(source), clientv3.WithPrefix(), clientv3.WithFilterPut())
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-retry.C:
		case _, ok := <-deleted:
			if !ok {
				deleted = nil // the watch ended: the retries go on
			}
		}
		if term, err := e.try(ctx, source, allow); term != nil || ctx.Err() != nil || errors.Is(err, errClosed) {
			if term == nil && err == nil {
				err = ctx.Err()
			}
			return term, err
		}
		retry.Reset(e.cfg.Timing.RetryPeriod)
	}
}

// try makes one attempt of Campaign: nil without an error when the source
// is held or allow refused.
func (e *EtcdElector) try(ctx context.Context, source string, allow func(bool) bool) (*Term, error) {
	s, err := e.currentSession(ctx)
	if err != nil {
		return nil, err
	}
	el := concurrency.NewElection(s.cs, e.sourcePrefix(source))
	if _, err := el.Leader(ctx); !errors.Is(err, concurrency.ErrElectionNoLeader) || !allow(false) {
		return nil, nil
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.lost:
			cancel()
		case <-cctx.Done():
		}
	}()
	// Campaign, cancelled while it waits behind another candidate, resigns
	// with the client's own context, which a replica cut off from etcd
	// waits on until the client is closed: do not wait for it then. Its
	// key, if it won meanwhile, goes with the session.
	campaigned := make(chan error, 1)
	go func() { campaigned <- el.Campaign(cctx, e.cfg.Identity) }()
	select {
	case err := <-campaigned:
		if err != nil {
			return nil, err
		}
	case <-cctx.Done():
		return nil, cctx.Err()
	}
	return e.term(s, el, source), nil
}

// term watches the leader key of a won election: the term is lost when the
// key is deleted (the lease revoked or expired, or the key removed by
// hand) or the session given up.
func (e *EtcdElector) term(s *etcdSession, el *concurrency.Election, source string) *Term {
	lost := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(lost) }) }
	wctx, stop := context.WithCancel(e.ctx)
	key, rev := el.Key(), el.Rev()
	go func() {
		defer stop()
		select {
		case <-s.lost:
			end()
		case <-lost:
		case <-wctx.Done():
		}
	}()
	// Apart from the wait above: a watch is only returned once etcd has
	// answered, which a replica cut off from etcd waits for in vain.
	go func() {
		defer end()
		wch := e.cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.Err() != nil {
				return
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					return
				}
			}
		}
	}()
	return &Term{Source: source, Token: rev, lost: lost, resign: func(ctx context.Context) error {
		defer end()
		return el.Resign(ctx)
	}}
}

// Close revokes the replica's lease, which ends its membership and deletes
// any leader key it still holds.
func (e *EtcdElector) Close() error {
	e.mu.Lock()
	s := e.session
	e.mu.Unlock()
	e.cancel()
	if s == nil {
		return nil
	}
	s.lose()
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timing.RenewDeadline)
	defer cancel()
	_, err := e.cli.Revoke(ctx, s.cs.Lease())
	return err
}
