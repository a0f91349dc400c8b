package kubernetes

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestContract(t *testing.T) {
	needAPIServer(t)
	// The holders write protobuf, as client-go does by default, so that a
	// holder identity keeps its bytes whatever they are.
	holders := rest.CopyConfig(apiserver.Config)
	holders.ContentType = "application/vnd.kubernetes.protobuf"
	collectortest.Test(t, &contract{proxy: startProxy(t, apiserver.Config), holders: holders})
}

// Contract timings: each holder's Lease lasts contractLease and is renewed
// every contractRenew, client-go's ratio of RetryPeriod to LeaseDuration
// or a little more often; an outage lasts half a lease.
const (
	contractLease  = 4 * time.Second
	contractRenew  = 500 * time.Millisecond
	contractOutage = contractLease / 2
)

// contract drives the package's kube-apiserver for the collector contract:
// each scope is a namespace, each lock a Lease in it written as client-go's
// leader election writes it (through resourcelock.LeaseLock, renewed in the
// background like an elector), and the collector watches through a proxy
// that Outage cuts, while the holders go on writing to the apiserver
// directly, as holders elsewhere in the cluster would.
type contract struct {
	proxy   *apiProxy
	holders *rest.Config // the holders' client configuration
}

func (*contract) Declaration() collectors.Backend { return Backend }

// Collector watches the namespace scope, created here if it is new (a
// restart asks again for the same scope). The collector is restarted from
// its cursor after a failure the proxy caused, as leasewatch's Runner does;
// any other failure ends Run.
func (b *contract) Collector(t *testing.T, source, scope string) collectors.Collector {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scope}}
	if _, err := admin(t).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", scope, err)
	}
	c, err := New(Config{Name: source, Namespaces: []string{scope}}, collectortest.Logger(t, source), WithRESTConfig(b.proxy.config()))
	if err != nil {
		t.Fatal(err)
	}
	return &acrossOutages{Collector: c, proxy: b.proxy, log: t}
}

func (*contract) LockName(scope, name string) string { return scope + "/" + name }

// Acquire takes the Lease as client-go's tryAcquireOrRenew does: created
// with leaseTransitions 0, or taken over once free or run out, with
// leaseTransitions one up unless the holder is already its own. It then
// renews it every contractRenew until Release, Lapse or the test's end.
func (b *contract) Acquire(t *testing.T, scope, name, holder string) collectortest.Held {
	t.Helper()
	h := &leaseHolder{
		t:    t,
		lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: scope, Name: name}, Client: clientFor(t, b.holders).CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: holder}},
		done: make(chan struct{}),
	}
	deadline := time.Now().Add(20 * time.Second)
	for !h.tryAcquire() {
		if time.Now().After(deadline) {
			t.Fatalf("Lease %s/%s not acquired by %q within 20s", scope, name, holder)
		}
		time.Sleep(contractRenew) // client-go's RetryPeriod
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.renewing(ctx)
	t.Cleanup(h.stop)
	return h
}

// Outage cuts every connection of the collector to the apiserver and
// refuses new ones for half a lease, and at least until the collector has
// tried again and been refused. The holders renew meanwhile.
func (b *contract) Outage(t *testing.T) func() {
	t.Helper()
	p := b.proxy
	cut := time.Now()
	refused := p.cut()
	collectortest.Eventually(t, 10*time.Second, "the collector to be refused by the cut apiserver", func() bool {
		return p.refused.Load() > refused && time.Since(cut) >= contractOutage
	})
	return p.restore
}

// Traits: every renewal is a write of renewTime. The collector resumes its
// watch from the resourceVersion its cursor stores, so neither a restart
// nor an outage is a blind window while the apiserver still has that
// history (when it has not, the 410 is one: TestWatchGoneRelists). A
// Lease's name is a DNS subdomain. Its holderIdentity is any bytes: the
// apiserver takes control characters, 200,000 characters and invalid UTF-8
// alike (written as protobuf, client-go's default for Leases; a JSON writer
// sends U+FFFD instead), and the collector reads protobuf.
func (*contract) Traits() collectortest.Traits {
	return collectortest.Traits{Renewals: true, Resumes: true, Names: collectortest.Plain, Holders: collectortest.AnyBytes}
}

// acrossOutages runs a collector again from its stored cursor when it
// fails across an outage: the Kubernetes collector's Run ends when it loses
// the apiserver, and leasewatch's Runner restarts it with backoff. A
// failure is the outage's if the proxy cut or refused a connection since
// the collector was last up; any other is returned.
type acrossOutages struct {
	*Collector
	proxy *apiProxy
	log   testing.TB
}

func (c *acrossOutages) Run(ctx context.Context, sink collectors.Sink, ready func()) error {
	var mu sync.Mutex
	upCuts := c.proxy.cuts() // the proxy's cuts when the collector was last up
	var once sync.Once
	up := func() {
		mu.Lock()
		upCuts = c.proxy.cuts()
		mu.Unlock()
		once.Do(ready)
	}
	for attempt := 0; ; attempt++ {
		err := c.Collector.Run(ctx, sink, up)
		mu.Lock()
		cut := c.proxy.cuts() != upCuts
		mu.Unlock()
		if err == nil || !cut {
			return err
		}
		delay := collectors.Backoff(100*time.Millisecond, time.Second, attempt, rand.Float64())
		c.log.Logf("collector failed across the outage: %v; restarting in %s", err, delay.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// leaseHolder holds one Lease the way a client-go leader elector does.
type leaseHolder struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan struct{} // closed when renewing returns
	once   sync.Once

	mu    sync.Mutex // the lock and record, shared by the renewals and the test
	lock  *resourcelock.LeaseLock
	rec   resourcelock.LeaderElectionRecord
	token int64
}

// tryAcquire is client-go's tryAcquireOrRenew for a candidate that does not
// lead yet: it reports whether the Lease is now its own.
func (h *leaseHolder) tryAcquire() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := metav1.Now()
	id := h.lock.Identity()
	rec := resourcelock.LeaderElectionRecord{HolderIdentity: id, LeaseDurationSeconds: int(contractLease / time.Second), AcquireTime: now, RenewTime: now}
	old, _, err := h.lock.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		if err := h.lock.Create(ctx, rec); err != nil {
			h.t.Logf("create Lease %s: %v", h.lock.Describe(), err)
			return false
		}
	case err != nil:
		h.t.Logf("get Lease %s: %v", h.lock.Describe(), err)
		return false
	default:
		valid := now.Time.Before(old.RenewTime.Time.Add(time.Duration(old.LeaseDurationSeconds) * time.Second))
		if old.HolderIdentity != "" && old.HolderIdentity != id && valid {
			return false
		}
		if old.HolderIdentity == id {
			rec.AcquireTime, rec.LeaderTransitions = old.AcquireTime, old.LeaderTransitions
		} else {
			rec.LeaderTransitions = old.LeaderTransitions + 1
		}
		if err := h.lock.Update(ctx, rec); err != nil {
			h.t.Logf("take Lease %s: %v", h.lock.Describe(), err)
			return false
		}
	}
	h.rec, h.token = rec, int64(rec.LeaderTransitions)
	return true
}

// renew writes a new renewTime, as the leader's fast path does.
func (h *leaseHolder) renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, contractLease)
	defer cancel()
	rec := h.rec
	rec.RenewTime = metav1.Now()
	if err := h.lock.Update(ctx, rec); err != nil {
		return err
	}
	h.rec = rec
	return nil
}

// renewing renews every contractRenew until ctx ends. A failed renewal is
// tried again at the next tick, as client-go does within its deadline.
func (h *leaseHolder) renewing(ctx context.Context) {
	defer close(h.done)
	tick := time.NewTicker(contractRenew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := h.renew(ctx); err != nil && ctx.Err() == nil {
			h.t.Logf("renew Lease %s: %v", h.lock.Describe(), err)
		}
	}
}

// stop ends the renewals and waits for the one in flight.
func (h *leaseHolder) stop() {
	h.once.Do(func() {
		h.cancel()
		<-h.done
	})
}

func (h *leaseHolder) Holder() string { return h.lock.Identity() }
func (h *leaseHolder) Token() *int64  { return &h.token }

func (h *leaseHolder) Renew(t *testing.T) {
	t.Helper()
	if err := h.renew(context.Background()); err != nil {
		t.Fatalf("renew Lease %s: %v", h.lock.Describe(), err)
	}
}

// Release is client-go's tryRelease (ReleaseOnCancel): holderIdentity
// cleared, leaseDurationSeconds 1, acquireTime and renewTime now,
// leaseTransitions kept.
func (h *leaseHolder) Release(t *testing.T) {
	t.Helper()
	h.stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	now := metav1.Now()
	rec := resourcelock.LeaderElectionRecord{LeaderTransitions: h.rec.LeaderTransitions, LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.lock.Update(ctx, rec)
		if apierrors.IsConflict(err) && attempt < 3 {
			_, _, err = h.lock.Get(ctx) // as tryRelease does: read the Lease again, and retry
			cancel()
			if err != nil {
				t.Fatalf("release Lease %s: %v", h.lock.Describe(), err)
			}
			continue
		}
		cancel()
		if err != nil {
			t.Fatalf("release Lease %s: %v", h.lock.Describe(), err)
		}
		h.rec = rec
		return
	}
}

// Lapse stops renewing, as a holder that crashed or was stopped without
// ReleaseOnCancel does: the lease runs out by the clock.
func (h *leaseHolder) Lapse(*testing.T) { h.stop() }

// apiProxy forwards TCP connections to the apiserver until cut: then it
// closes every connection it carries and every new one at once, as a
// crashed apiserver or a partition does to the collector, until restore.
type apiProxy struct {
	ln     net.Listener
	target string
	host   *rest.Config

	mu      sync.Mutex
	down    bool
	conns   map[net.Conn]struct{}
	dropped int64 // connections closed by cut
	refused atomic.Int64
	wg      sync.WaitGroup
}

func startProxy(t *testing.T, cfg *rest.Config) *apiProxy {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: u.Host, conns: make(map[net.Conn]struct{})}
	p.host = rest.CopyConfig(cfg)
	p.host.Host = "https://" + ln.Addr().String()
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.down = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// config is the apiserver's admin configuration, through the proxy.
func (p *apiProxy) config() *rest.Config { return rest.CopyConfig(p.host) }

func (p *apiProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track adds c to the connections carried, or closes it while cut.
func (p *apiProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		c.Close()
		p.refused.Add(1)
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *apiProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *apiProxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(server) {
		p.untrack(client)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	p.untrack(client, server)
	<-done
}

// cut closes every connection and refuses new ones until restore. It
// returns how many were refused so far.
func (p *apiProxy) cut() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
		p.dropped++
	}
	return p.refused.Load()
}

func (p *apiProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// cuts counts the connections the proxy has closed or refused: a
// collector's failure while it rises is the proxy's doing.
func (p *apiProxy) cuts() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped + p.refused.Load()
}
