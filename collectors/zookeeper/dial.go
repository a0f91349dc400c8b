package zookeeper

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// conn is the collector's session with the ensemble, and what happened to
// it since the run last looked: go-zookeeper reconnects by itself, and
// reports each state change to a callback that must not block.
type conn struct {
	zk      *zk.Conn
	changed chan struct{} // signalled when lost or back is set

	mu   sync.Mutex
	lost time.Time // when the connection or session was first lost; zero while seeing
	why  string
	back bool // a session is established again since lost
}

// sessionEvent records a session state change for the run.
func (c *conn) sessionEvent(ev zk.Event, now time.Time) {
	if ev.Type != zk.EventSession {
		return
	}
	c.mu.Lock()
	switch ev.State {
	case zk.StateDisconnected, zk.StateExpired, zk.StateAuthFailed:
		switch {
		case c.lost.IsZero():
			c.lost, c.why, c.back = now, lostReason(ev.State, ev.Server), false
		case ev.State != zk.StateDisconnected:
			// The loss began as a disconnect; say what it came to.
			c.why = lostReason(ev.State, ev.Server) + " (after " + c.why + ")"
		}
	case zk.StateHasSession:
		c.back = !c.lost.IsZero()
	}
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func lostReason(s zk.State, server string) string {
	switch s {
	case zk.StateExpired:
		return "the collector's own ZooKeeper session expired: its watches are gone"
	case zk.StateAuthFailed:
		return "ZooKeeper refused the collector's credentials"
	}
	return fmt.Sprintf("lost the connection to ZooKeeper server %s", server)
}

// regained returns, once a session is established again after a loss, when
// the loss began and why, and forgets it.
func (c *conn) regained() (time.Time, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.back {
		return time.Time{}, "", false
	}
	from, why := c.lost, c.why
	c.lost, c.why, c.back = time.Time{}, "", false
	return from, why, true
}

// seeing reports whether the session is up and nothing was lost since the
// run last read everything.
func (c *conn) seeing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost.IsZero()
}

func (c *conn) close() { c.zk.Close() }

// dial connects to the servers, with TLS and the digest credentials when
// configured, and waits up to the dial timeout for a session.
func (c *Collector) dial(ctx context.Context) (*conn, error) {
	password, err := c.cfg.Password.Get()
	if err != nil {
		return nil, fmt.Errorf("connect to zookeeper %v: password file: %w", c.cfg.Servers, err)
	}
	cn := &conn{changed: make(chan struct{}, 1)}
	z, events, err := zk.Connect(c.cfg.Servers, c.cfg.SessionTimeout,
		zk.WithDialer(c.dialServer),
		zk.WithLogger(zkLogger{c.log}),
		zk.WithLogInfo(false),
		zk.WithEventCallback(func(ev zk.Event) { cn.sessionEvent(ev, c.now()) }),
		// A znode holds at most 1 MiB by default (jute.maxbuffer); a bigger
		// packet is no lock recipe's.
		zk.WithMaxBufferSize(4<<20),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to zookeeper %v: %w", c.cfg.Servers, err)
	}
	go func() {
		for range events { // the callback sees every event; drain the channel
		}
	}()
	cn.zk = z
	if err := waitSession(ctx, z, c.cfg.DialTimeout); err != nil {
		z.Close()
		return nil, fmt.Errorf("connect to zookeeper %v: %w", c.cfg.Servers, err)
	}
	if c.cfg.Username != "" {
		if err := z.AddAuth("digest", []byte(c.cfg.Username+":"+password)); err != nil {
			z.Close()
			return nil, fmt.Errorf("connect to zookeeper %v: digest authentication as %s: %w", c.cfg.Servers, c.cfg.Username, err)
		}
	}
	return cn, nil
}

// waitSession polls until z has a session, ctx ends or timeout passes.
func waitSession(ctx context.Context, z *zk.Conn, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for z.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			return fmt.Errorf("no session within %s (state %s)", timeout, z.State())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// dialServer connects to one server: over TLS with the configuration
// asked for now when TLS is configured, else in plain text.
func (c *Collector) dialServer(network, addr string, timeout time.Duration) (net.Conn, error) {
	cfg, err := c.cfg.TLS.Get()
	if err != nil {
		return nil, err
	}
	nc, err := c.netDial(network, addr, timeout)
	if err != nil || cfg == nil {
		return nc, err
	}
	tc := tls.Client(nc, withServerName(cfg, addr))
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		nc.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// zkLogger routes go-zookeeper's own messages (reconnect attempts, which
// the collector reports as blind windows) to the debug log.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "go-zookeeper")
}

// withServerName returns cfg naming addr's host as the server to verify,
// unless it names one already (tls.Dialer's rule).
func withServerName(cfg *tls.Config, addr string) *tls.Config {
	if cfg.ServerName != "" {
		return cfg
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return cfg
	}
	cfg = cfg.Clone()
	cfg.ServerName = host
	return cfg
}
