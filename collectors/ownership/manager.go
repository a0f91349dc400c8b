package ownership

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Sources are the names of the sources to share.
	Sources []string
	// RetryPeriod is how often the share is checked; the elector's
	// Timing.RetryPeriod, default DefaultRetryPeriod.
	RetryPeriod time.Duration
	// OnAcquired is called when this replica is granted source, with the
	// grant's token: start the source's collector and tracker, fenced with
	// token. OnLost is called when the grant is over: stop them at once.
	// They are called one at a time, each grant's OnLost after its
	// OnAcquired, and must not block.
	OnAcquired func(source string, token int64)
	OnLost     func(source string)
	// Logger receives the grants, losses and resignations; nil discards.
	Logger *slog.Logger
}

// Manager shares sources among the replicas of an Elector. Each replica
// takes at most its share of them, and one more only to take over a source
// whose holder's lease ran out; one over its share resigns a source per
// RetryPeriod, so sources move to a replica that joins. With S sources and
// N live replicas the share is floor(S / N), and one more for the S mod N
// replicas whose identities sort first: the shares add up to S, so every
// replica ends with floor(S / N) or ceil(S / N) of them.
type Manager struct {
	el  Elector
	cfg ManagerConfig
	log *slog.Logger

	mu        sync.Mutex
	held      map[string]*Term
	resign    map[string]chan struct{} // per held source: closed to resign it
	members   int
	rank      int // this replica's place among the members by identity
	countedAt time.Time

	callbacks sync.Mutex // serializes OnAcquired and OnLost
}

// NewManager returns a manager of cfg.Sources on el.
func NewManager(el Elector, cfg ManagerConfig) *Manager {
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.OnAcquired == nil {
		cfg.OnAcquired = func(string, int64) {}
	}
	if cfg.OnLost == nil {
		cfg.OnLost = func(string) {}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{el: el, cfg: cfg, log: log, held: make(map[string]*Term), resign: make(map[string]chan struct{}), members: 1}
}

// Run campaigns for the sources and keeps the share until ctx ends; then it
// stops and resigns every source it holds (OnLost, then Resign), and
// returns.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, src := range slices.Compact(slices.Sorted(slices.Values(m.cfg.Sources))) {
		wg.Go(func() { m.own(ctx, src) })
	}
	m.balance(ctx)
	wg.Wait()
}

// Held returns the sources this replica holds, with their tokens.
func (m *Manager) Held() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.held))
	for src, t := range m.held {
		out[src] = t.Token
	}
	return out
}

// share is floor(sources / members), plus one for the first
// sources mod members ranks.
func (m *Manager) share() int {
	n := max(m.members, 1)
	share := len(m.cfg.Sources) / n
	if m.rank < len(m.cfg.Sources)%n {
		share++
	}
	return share
}

// count refreshes the number of live replicas.
func (m *Manager) count(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.cfg.RetryPeriod)
	defer cancel()
	n, rank, err := m.el.Members(cctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("cannot count the replicas; keeping the last count", "err", err, "replicas", m.members)
		}
		return
	}
	m.mu.Lock()
	m.members, m.rank, m.countedAt = n, rank, time.Now()
	m.mu.Unlock()
}

// allow is the elector's gate: below the share, or at it for a takeover.
// A refusal on a count older than half a RetryPeriod counts again first,
// so that a replica that just left is not waited for.
func (m *Manager) allow(ctx context.Context) func(takeover bool) bool {
	return func(takeover bool) bool {
		for fresh := false; ; fresh = true {
			m.mu.Lock()
			held, share, stale := len(m.held), m.share(), time.Since(m.countedAt) > m.cfg.RetryPeriod/2
			m.mu.Unlock()
			if held < share || takeover && held <= share {
				return true
			}
			if fresh || !stale {
				return false
			}
			m.count(ctx)
		}
	}
}

// balance counts the replicas every RetryPeriod and resigns a source when
// this replica holds more than its share.
func (m *Manager) balance(ctx context.Context) {
	for {
		m.count(ctx)
		m.mu.Lock()
		if excess := len(m.held) - m.share(); excess > 0 {
			// The source granted last goes: the others keep running.
			var last string
			var token int64 = -1
			for src, t := range m.held {
				if ch := m.resign[src]; t.Token > token && ch != nil {
					last, token = src, t.Token
				}
			}
			if last != "" {
				m.log.Info("over this replica's share: resigning a source", "source", last, "held", len(m.held), "share", m.share())
				close(m.resign[last])
				m.resign[last] = nil
			}
		}
		m.mu.Unlock()
		if wait(ctx, m.cfg.RetryPeriod) != nil {
			return
		}
	}
}

// own campaigns for src, holds it while the term lasts, and campaigns
// again, until ctx ends.
func (m *Manager) own(ctx context.Context, src string) {
	for ctx.Err() == nil {
		term, err := m.el.Campaign(ctx, src, m.allow(ctx))
		if err != nil {
			if errors.Is(err, errClosed) {
				return
			}
			if ctx.Err() == nil {
				m.log.Warn("campaign failed", "source", src, "err", err)
				_ = wait(ctx, m.cfg.RetryPeriod)
			}
			continue
		}
		m.hold(ctx, term)
	}
}

// hold reports the grant, waits for its end and reports that.
func (m *Manager) hold(ctx context.Context, term *Term) {
	resign := make(chan struct{})
	m.mu.Lock()
	m.held[term.Source], m.resign[term.Source] = term, resign
	m.mu.Unlock()
	m.log.Info("source acquired", "source", term.Source, "token", term.Token)
	m.call(func() { m.cfg.OnAcquired(term.Source, term.Token) })

	release := false
	select {
	case <-term.Lost():
		m.log.Warn("source lost: its lease could not be renewed or was taken over", "source", term.Source, "token", term.Token)
	case <-resign:
		release = true
	case <-ctx.Done():
		release = true
	}
	// Stop the source before the lease can pass to another replica.
	m.call(func() { m.cfg.OnLost(term.Source) })
	m.mu.Lock()
	delete(m.held, term.Source)
	delete(m.resign, term.Source)
	m.mu.Unlock()
	if release {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.RetryPeriod*5)
		if err := term.Resign(rctx); err != nil {
			m.log.Warn("resign failed; the lease will run out instead", "source", term.Source, "err", err)
		}
		cancel()
		m.log.Info("source resigned", "source", term.Source, "token", term.Token)
	}
}

func (m *Manager) call(f func()) {
	m.callbacks.Lock()
	defer m.callbacks.Unlock()
	f()
}
