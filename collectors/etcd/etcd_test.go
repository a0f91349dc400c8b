package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestNewValidates(t *testing.T) {
	ok := Config{Name: "prod-etcd", Endpoints: []string{"127.0.0.1:2379"}, Prefixes: []string{"/locks/"}}
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"NoName", func(c *Config) { c.Name = "" }, "name: required"},
		{"NoEndpoints", func(c *Config) { c.Endpoints = nil }, "endpoints: at least one required"},
		{"EmptyEndpoint", func(c *Config) { c.Endpoints = []string{""} }, "endpoints[0]: empty"},
		{"NoPrefixes", func(c *Config) { c.Prefixes = nil }, "prefixes: at least one required"},
		{"EmptyPrefix", func(c *Config) { c.Prefixes = []string{"/locks/", ""} }, "prefixes[1]: empty"},
		{"NegativePoll", func(c *Config) { c.PollInterval = -time.Second }, "poll_interval: must not be negative"},
		{"PasswordWithoutUser", func(c *Config) { c.Password = collectors.Password("x") }, "username: required with a password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.modify(&cfg)
			_, err := New(cfg, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("New: err = %v, want one starting %q", err, tt.want)
			}
			if audit.ErrorCode(err) != audit.EINVALID {
				t.Fatalf("error code = %q, want %q", audit.ErrorCode(err), audit.EINVALID)
			}
		})
	}
	c, err := New(ok, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "prod-etcd" || c.Kind() != audit.KindEtcd || c.cfg.PollInterval != DefaultPollInterval || c.cfg.DialTimeout != DefaultDialTimeout {
		t.Fatalf("defaults not applied: %+v", c.cfg)
	}
}

func TestUncontendedLockUnlock(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)

	// A lock held before the collector starts is observed, not granted: its
	// grant time is unknown.
	s0 := newSession(t, cli, 10)
	pre := lockMutex(t, s0, "/locks/pre")
	preToken := token(t, cli, pre.Key())

	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	first := sink.allInputs()[0]
	if !first.Snapshot || first.Cursor == "" || first.ExpireByClock || first.SequentialTokens || first.Kind != audit.KindEtcd {
		t.Fatalf("first input = %+v, want a snapshot with a cursor, etcd kind, no clock expiry, no sequential tokens", first)
	}
	if len(first.Observations) != 1 {
		t.Fatalf("snapshot has %d observations, want 1: %+v", len(first.Observations), first.Observations)
	}
	ob := first.Observations[0]
	if ob.Kind != audit.EventObserved || ob.Lock.Name != "/locks/pre" || tokenOf(ob) != preToken || ob.Holder != leaseHolder(s0) {
		t.Fatalf("snapshot observation = %+v, want observed /locks/pre token %d holder %s", ob, preToken, leaseHolder(s0))
	}
	if ob.LeaseDuration != 10*time.Second {
		t.Fatalf("LeaseDuration = %s, want the session TTL 10s", ob.LeaseDuration)
	}

	s1 := newSession(t, cli, 10)
	m := lockMutex(t, s1, "/locks/a")
	tok := token(t, cli, m.Key())
	delRev := unlock(t, cli, m)
	rel := sink.waitObs(t, 5*time.Second, "/locks/a", 1, audit.EventRelease)[0]

	grants := sink.obs("/locks/a", audit.EventGrant)
	if len(grants) != 1 {
		t.Fatalf("grants of /locks/a = %d, want 1", len(grants))
	}
	g := grants[0]
	if tokenOf(g) != tok || g.Holder != leaseHolder(s1) || g.Position != strconv.FormatInt(tok, 10) || g.LeaseDuration != 10*time.Second {
		t.Fatalf("grant = %+v, want token %d holder %s at position %d with a 10s lease", g, tok, leaseHolder(s1), tok)
	}
	if g.Detail["key"] != m.Key() {
		t.Fatalf("grant detail key = %v, want %s", g.Detail["key"], m.Key())
	}
	if tokenOf(rel) != tok || rel.Holder != g.Holder || rel.Position != strconv.FormatInt(delRev, 10) || rel.Detail["revoked"] != nil {
		t.Fatalf("release = %+v, want token %d at position %d, not revoked", rel, tok, delRev)
	}

	unlock(t, cli, pre)
	sink.waitObs(t, 5*time.Second, "/locks/pre", 1, audit.EventRelease)
	if st := sink.state("/locks/pre"); st.Lock.State != audit.StateFree {
		t.Fatalf("tracker state of /locks/pre = %s, want free", st.Lock.State)
	}
	if f := sink.findingsOf(audit.FindingLeaseExpired); len(f) != 0 {
		t.Fatalf("lease_expired findings after unlocks: %+v", f)
	}
}

func TestThreeWaitersGrantedInOrder(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	sessions := []*concurrency.Session{newSession(t, cli, 10), newSession(t, cli, 10), newSession(t, cli, 10)}
	first := lockMutex(t, sessions[0], "/locks/q")

	// Queue the waiters one at a time so their keys are created in order.
	type acquired struct {
		m   *concurrency.Mutex
		err error
	}
	got := make([]chan acquired, 3)
	got[0] = make(chan acquired, 1)
	got[0] <- acquired{m: first}
	for i := 1; i < 3; i++ {
		got[i] = make(chan acquired, 1)
		m := concurrency.NewMutex(sessions[i], "/locks/q")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got[i] <- acquired{m: m, err: m.Lock(ctx)}
		}()
		collectortest.Eventually(t, 5*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			resp, err := cli.Get(context.Background(), "/locks/q/", clientv3.WithPrefix())
			return err == nil && len(resp.Kvs) == i+1
		})
	}

	var tokens, delRevs []int64
	for i := 0; i < 3; i++ {
		a := <-got[i]
		if a.err != nil {
			t.Fatalf("waiter %d: %v", i, a.err)
		}
		tokens = append(tokens, token(t, cli, a.m.Key()))
		delRevs = append(delRevs, unlock(t, cli, a.m))
	}
	sink.waitObs(t, 5*time.Second, "/locks/q", 3, audit.EventRelease)

	grants := sink.obs("/locks/q", audit.EventGrant)
	if len(grants) != 3 {
		t.Fatalf("grants = %d, want 3", len(grants))
	}
	for i, g := range grants {
		if tokenOf(g) != tokens[i] || g.Holder != leaseHolder(sessions[i]) {
			t.Fatalf("grant %d = token %d holder %s, want token %d holder %s", i, tokenOf(g), g.Holder, tokens[i], leaseHolder(sessions[i]))
		}
		if i > 0 {
			// A waiter's turn starts when its predecessor's key goes.
			if want := strconv.FormatInt(delRevs[i-1], 10); g.Position != want {
				t.Fatalf("grant %d at position %s, want the predecessor's deletion revision %s", i, g.Position, want)
			}
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("tokens %v do not increase", tokens)
			}
		}
	}
	for _, k := range []audit.FindingKind{audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingOverlap} {
		if f := sink.findingsOf(k); len(f) != 0 {
			t.Fatalf("%s findings: %+v", k, f)
		}
	}
}

func TestTryLockContentionIsNoGrant(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	s1, s2 := newSession(t, cli, 10), newSession(t, cli, 10)
	m1 := lockMutex(t, s1, "/locks/t")
	m2 := concurrency.NewMutex(s2, "/locks/t")
	if err := m2.TryLock(context.Background()); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("TryLock = %v, want ErrLocked", err)
	}
	// TryLock put its key and deleted it again; wait until the collector has
	// seen both revisions.
	sink.waitCursor(t, head(t, cli))

	grants := sink.obs("/locks/t", audit.EventGrant)
	if len(grants) != 1 || grants[0].Holder != leaseHolder(s1) {
		t.Fatalf("grants = %+v, want only %s's", grants, leaseHolder(s1))
	}
	if ends := sink.obs("/locks/t", audit.EventRelease, audit.EventExpire); len(ends) != 0 {
		t.Fatalf("ends = %+v, want none: the holder never let go", ends)
	}
	unlock(t, cli, m1)
	sink.waitObs(t, 5*time.Second, "/locks/t", 1, audit.EventRelease)
}

func TestOrphanedSessionExpires(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	s, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	m := lockMutex(t, s, "/locks/o")
	tok := token(t, cli, m.Key())
	sink.waitObs(t, 5*time.Second, "/locks/o", 1, audit.EventGrant)
	s.Orphan() // stop keepalives: the lease runs out by itself

	exp := sink.waitObs(t, 10*time.Second, "/locks/o", 1, audit.EventExpire, audit.EventRelease)[0]
	if exp.Kind != audit.EventExpire || tokenOf(exp) != tok {
		t.Fatalf("end = %s token %d (%v), want expire token %d", exp.Kind, tokenOf(exp), exp.Detail["reason"], tok)
	}
	f := sink.findingsOf(audit.FindingLeaseExpired)
	if len(f) != 1 || len(f[0].Tokens) != 1 || f[0].Tokens[0] != tok {
		t.Fatalf("lease_expired findings = %+v, want one for token %d", f, tok)
	}
}

func TestSessionCloseIsRelease(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	lockMutex(t, s, "/locks/c")
	sink.waitObs(t, 5*time.Second, "/locks/c", 1, audit.EventGrant)
	if err := s.Close(); err != nil { // revokes the lease, deleting its keys
		t.Fatal(err)
	}
	end := sink.waitObs(t, 5*time.Second, "/locks/c", 1, audit.EventExpire, audit.EventRelease)[0]
	if end.Kind != audit.EventRelease || end.Detail["revoked"] != true {
		t.Fatalf("end = %s %v, want release with revoked=true", end.Kind, end.Detail)
	}
	if f := sink.findingsOf(audit.FindingLeaseExpired); len(f) != 0 {
		t.Fatalf("lease_expired findings after Session.Close: %+v", f)
	}
}

func TestElectionCampaignProclaimResign(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	// The demo hands the collector its own client: it must use it and
	// leave it open.
	c, err := NewWithClient(testConfig([]string{"/election/"}), cli, collectortest.Logger(t, testSource), WithProgressInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	cr := collectortest.Run(t, c, sink)
	defer func() {
		cr.Stop(t)
		if _, err := cli.Get(context.Background(), "/election/"); err != nil {
			t.Errorf("shared client after the collector stopped: %v", err)
		}
	}()

	s1, s2 := newSession(t, cli, 10), newSession(t, cli, 10)
	e1 := concurrency.NewElection(s1, "/election/leader")
	if err := e1.Campaign(context.Background(), "node-a"); err != nil {
		t.Fatal(err)
	}
	e2 := concurrency.NewElection(s2, "/election/leader")
	won := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		won <- e2.Campaign(ctx, "node-b")
	}()
	collectortest.Eventually(t, 5*time.Second, "second candidate queued", func() bool {
		resp, err := cli.Get(context.Background(), "/election/leader/", clientv3.WithPrefix())
		return err == nil && len(resp.Kvs) == 2
	})

	if err := e1.Proclaim(context.Background(), "node-a:v2"); err != nil {
		t.Fatal(err)
	}
	sink.waitCursor(t, head(t, cli))
	if got := sink.obs("/election/leader"); len(got) != 1 {
		t.Fatalf("observations after Proclaim = %+v, want only the first grant: a proclaim is neither a grant nor a renewal", got)
	}

	rev1 := e1.Rev()
	if err := e1.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	grants := sink.waitObs(t, 5*time.Second, "/election/leader", 2, audit.EventGrant)
	want := []struct {
		holder string
		token  int64
	}{{leaseHolder(s1) + " node-a", rev1}, {leaseHolder(s2) + " node-b", e2.Rev()}}
	for i, g := range grants {
		if g.Holder != want[i].holder || tokenOf(g) != want[i].token {
			t.Fatalf("grant %d = %q token %d, want %q token %d", i, g.Holder, tokenOf(g), want[i].holder, want[i].token)
		}
	}
	ends := sink.obs("/election/leader", audit.EventRelease, audit.EventExpire)
	if len(ends) != 1 || ends[0].Kind != audit.EventRelease || ends[0].Holder != want[0].holder {
		t.Fatalf("ends = %+v, want one release by %q (the holder as granted)", ends, want[0].holder)
	}
	// The tracker matched the release to the tenure and gave the lock to s2.
	if st := sink.state("/election/leader"); st.Lock.Holder != want[1].holder || st.Lock.State != audit.StateHeld {
		t.Fatalf("tracker: lock %s by %q, want held by %q", st.Lock.State, st.Lock.Holder, want[1].holder)
	}
}

func TestOneSessionTwoMutexes(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	lockMutex(t, s, "/locks/x")
	lockMutex(t, s, "/locks/y")
	sink.waitObs(t, 5*time.Second, "", 2, audit.EventGrant)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ends := sink.waitObs(t, 5*time.Second, "", 2, audit.EventRelease, audit.EventExpire)
	if len(ends) != 2 || ends[0].Position != ends[1].Position {
		t.Fatalf("ends = %+v, want two at one revision", ends)
	}
	for _, e := range ends {
		if e.Kind != audit.EventRelease || e.Detail["revoked"] != true || e.Holder != leaseHolder(s) {
			t.Fatalf("end of %s = %s %v, want a revoked release by %s", e.Lock.Name, e.Kind, e.Detail, leaseHolder(s))
		}
	}
	if ends[0].Lock.Name == ends[1].Lock.Name {
		t.Fatalf("both ends are of %s, want /locks/x and /locks/y", ends[0].Lock.Name)
	}
}

func TestNestedPrefixes(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	// Two configured prefixes, one inside the other: watched once.
	runCollector(t, ep, sink, "/locks/", "/locks/n/")

	s1, s2 := newSession(t, cli, 10), newSession(t, cli, 10)
	sub := lockMutex(t, s1, "/locks/n/sub")
	subTok := token(t, cli, sub.Key())

	// Mutex /locks/n counts every key under /locks/n/, so the nested lock's
	// key blocks it.
	parent := concurrency.NewMutex(s2, "/locks/n")
	locked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		locked <- parent.Lock(ctx)
	}()
	collectortest.Eventually(t, 5*time.Second, "parent waiter queued", func() bool {
		resp, err := cli.Get(context.Background(), "/locks/n/", clientv3.WithPrefix())
		return err == nil && len(resp.Kvs) == 2
	})
	sink.waitCursor(t, head(t, cli))
	if g := sink.obs("/locks/n", audit.EventGrant); len(g) != 0 {
		t.Fatalf("grant of /locks/n while /locks/n/sub's key is older: %+v", g)
	}
	if g := sink.obs("/locks/n/sub", audit.EventGrant); len(g) != 1 || tokenOf(g[0]) != subTok {
		t.Fatalf("grants of /locks/n/sub = %+v, want one with token %d", g, subTok)
	}

	delRev := unlock(t, cli, sub)
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	g := sink.waitObs(t, 5*time.Second, "/locks/n", 1, audit.EventGrant)[0]
	if g.Holder != leaseHolder(s2) || tokenOf(g) != token(t, cli, parent.Key()) || g.Position != strconv.FormatInt(delRev, 10) {
		t.Fatalf("grant of /locks/n = %+v, want %s at the nested key's deletion revision %d", g, leaseHolder(s2), delRev)
	}
	if n := len(sink.obs("/locks/n", audit.EventGrant)) + len(sink.obs("/locks/n/sub", audit.EventGrant)); n != 2 {
		t.Fatalf("%d grants in all, want 2 (the overlapping prefixes must not double them)", n)
	}
}

func TestRenewalsSeenByPolling(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	// With TTL 5 the session sends a keepalive about every 2s, which moves the
	// TTL by more than the 1s resolution of LeaseTimeToLive.
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	m := lockMutex(t, s, "/locks/r")
	tok := token(t, cli, m.Key())
	renews := sink.waitObs(t, 15*time.Second, "/locks/r", 2, audit.EventRenew)
	for _, r := range renews {
		if tokenOf(r) != tok || r.Holder != leaseHolder(s) || r.LeaseDuration != 5*time.Second || r.RenewedAt.IsZero() || r.RenewedAt.After(r.At) {
			t.Fatalf("renew = %+v, want token %d, holder %s, 5s lease, RenewedAt not after At", r, tok, leaseHolder(s))
		}
	}
	if st := sink.state("/locks/r"); len(st.Recent) != 1 || st.Recent[0].Renewals < 2 {
		t.Fatalf("tracker tenures = %+v, want one with >= 2 renewals", st.Recent)
	}

	s.Orphan()
	orphanedAt := time.Now()
	sink.waitObs(t, 15*time.Second, "/locks/r", 1, audit.EventExpire)
	for _, r := range sink.obs("/locks/r", audit.EventRenew) {
		if r.RenewedAt.After(orphanedAt) {
			t.Fatalf("renewal at %s reported after the session was orphaned at %s", r.RenewedAt, orphanedAt)
		}
	}
	if f := sink.findingsOf(audit.FindingLeaseExpired); len(f) != 1 {
		t.Fatalf("lease_expired findings = %+v, want 1", f)
	}
}

// An input of renewals alone carries the revision the renewals were judged
// at, as every input with observations does: the store keeps the cursor
// with what it records.
func TestRenewalInputsCarryTheCursor(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	s := newSession(t, cli, 5)
	lockMutex(t, s, "/locks/rc")
	sink.waitObs(t, 15*time.Second, "/locks/rc", 2, audit.EventRenew)
	want := strconv.FormatInt(head(t, cli), 10) // nothing changed after the grant
	renewalInputs := 0
	for _, in := range sink.allInputs() {
		if len(in.Observations) > 0 && in.Cursor == "" {
			t.Errorf("an input with %d observations (%s first) carries no cursor", len(in.Observations), in.Observations[0].Kind)
		}
		if len(in.Observations) > 0 && !slices.ContainsFunc(in.Observations, func(ob audit.Observation) bool { return ob.Kind != audit.EventRenew }) {
			renewalInputs++
			if in.Cursor != want {
				t.Errorf("an input of renewals carries cursor %q, want the revision of the grant, %s", in.Cursor, want)
			}
		}
	}
	if renewalInputs == 0 {
		t.Fatal("no input of renewals alone")
	}
	if pos, _ := sink.Cursor(testSource); pos != want {
		t.Fatalf("recorded cursor %q, want %s", pos, want)
	}
}

func TestCompactionWhileStopped(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()

	sA, sB, sC := newSession(t, cli, 10), newSession(t, cli, 10), newSession(t, cli, 10)
	cr := runCollector(t, ep, sink, "/locks/")
	mA := lockMutex(t, sA, "/locks/gone")
	lockMutex(t, sC, "/locks/kept")
	sink.waitObs(t, 5*time.Second, "", 2, audit.EventGrant)
	sink.waitCursor(t, head(t, cli))
	cr.Stop(t)
	_, stoppedAt := sink.Cursor(testSource)

	// While the collector is away: one lock is released, a new one is taken,
	// and the history is compacted.
	unlock(t, cli, mA)
	mB := lockMutex(t, sB, "/locks/new")
	tokB := token(t, cli, mB.Key())
	for i := 0; i < 3; i++ {
		if _, err := cli.Put(context.Background(), "/unrelated", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	rev := head(t, cli)
	if _, err := cli.Compact(context.Background(), rev); err != nil {
		t.Fatal(err)
	}

	before := len(sink.allInputs())
	runCollector(t, ep, sink, "/locks/")
	in := sink.allInputs()[before]
	if in.Blind == nil || !strings.Contains(in.Blind.Reason, "compaction") || !in.Snapshot {
		t.Fatalf("first input after restart = %+v, want a blind snapshot citing compaction", in)
	}
	if !in.Blind.From.Equal(stoppedAt) || in.Blind.To.Before(in.Blind.From) {
		t.Fatalf("blind window %s..%s, want from the stored cursor's time %s", in.Blind.From, in.Blind.To, stoppedAt)
	}
	if cur, _ := strconv.ParseInt(in.Cursor, 10, 64); cur < rev {
		t.Fatalf("cursor after blind snapshot = %s, want >= %d", in.Cursor, rev)
	}
	got := map[string]audit.Observation{}
	for _, ob := range in.Observations {
		if ob.Kind != audit.EventGrant || !ob.Inferred {
			t.Fatalf("observation %+v, want inferred grants", ob)
		}
		got[ob.Lock.Name] = ob
	}
	if len(got) != 2 || tokenOf(got["/locks/new"]) != tokB || got["/locks/kept"].Holder != leaseHolder(sC) {
		t.Fatalf("blind snapshot holds %v, want /locks/kept and /locks/new (token %d)", got, tokB)
	}

	// The tracker: /locks/gone ended while blind, /locks/kept carried on with
	// its tenure, /locks/new has a new one, and the window is a finding.
	if st := sink.state("/locks/gone"); st.Lock.State == audit.StateHeld {
		t.Fatalf("/locks/gone still held after the blind snapshot")
	}
	if st := sink.state("/locks/kept"); len(st.Recent) != 1 || !st.Recent[0].Held() {
		t.Fatalf("/locks/kept tenures = %+v, want the one tenure, still held", st.Recent)
	}
	if f := sink.findingsOf(audit.FindingBlindWindow); len(f) == 0 {
		t.Fatal("no blind_window finding")
	}
	if f := sink.findingsOf(audit.FindingTokenReuse); len(f) != 0 {
		t.Fatalf("token_reuse findings: %+v", f)
	}

	// And it watches on from the new head.
	delRev := unlock(t, cli, mB)
	rel := sink.waitObs(t, 5*time.Second, "/locks/new", 1, audit.EventRelease)[0]
	if rel.Position != strconv.FormatInt(delRev, 10) {
		t.Fatalf("release after restart at %s, want %d", rel.Position, delRev)
	}
}

func TestCompactionMidWatch(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	px := startProxy(t, ep)
	sink := newRecorder()
	runCollector(t, px.url(), sink, "/locks/")

	sA, sB := newSession(t, cli, 10), newSession(t, cli, 10)
	mA := lockMutex(t, sA, "/locks/a")
	sink.waitObs(t, 5*time.Second, "/locks/a", 1, audit.EventGrant)
	sink.waitCursor(t, head(t, cli))
	_, lastSeen := sink.Cursor(testSource)

	// etcd drops out of the collector's reach; meanwhile /locks/a changes
	// hands and the history is compacted. When the connection comes back,
	// the client's automatic watch resume finds its revision gone.
	px.cut()
	cutAt := time.Now()
	unlock(t, cli, mA)
	mB := lockMutex(t, sB, "/locks/a")
	tokB := token(t, cli, mB.Key())
	rev := head(t, cli)
	if _, err := cli.Compact(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	px.restore()

	var blind audit.Input
	collectortest.Eventually(t, 20*time.Second, "a blind input", func() bool {
		for _, in := range sink.allInputs() {
			if in.Blind != nil {
				blind = in
				return true
			}
		}
		return false
	})
	if !strings.Contains(blind.Blind.Reason, "compaction") || !blind.Snapshot {
		t.Fatalf("blind input = %+v, want a snapshot citing compaction", blind)
	}
	if blind.Blind.From.Before(lastSeen) || blind.Blind.From.After(cutAt) {
		t.Fatalf("blind from %s, want the last revision the collector saw (%s .. %s)", blind.Blind.From, lastSeen, cutAt)
	}
	if len(blind.Observations) != 1 || tokenOf(blind.Observations[0]) != tokB || !blind.Observations[0].Inferred {
		t.Fatalf("blind snapshot observations = %+v, want one inferred grant with token %d", blind.Observations, tokB)
	}
	st := sink.state("/locks/a")
	if n := len(st.Recent); n != 2 || st.Recent[0].Held() || st.Lock.Holder != leaseHolder(sB) {
		t.Fatalf("tracker tenures = %+v, want the first ended and %s holding", st.Recent, leaseHolder(sB))
	}

	delRev := unlock(t, cli, mB)
	rel := sink.waitObs(t, 10*time.Second, "/locks/a", 1, audit.EventRelease)[0]
	if rel.Position != strconv.FormatInt(delRev, 10) || tokenOf(rel) != tokB {
		t.Fatalf("release after the blind window = %+v, want token %d at %d", rel, tokB, delRev)
	}
}

func TestUnreachableEtcdFailsRun(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	px := startProxy(t, ep)
	sink := newRecorder()
	cr := runCollector(t, px.url(), sink, "/locks/")

	s := newSession(t, cli, 10)
	m := lockMutex(t, s, "/locks/u")
	sink.waitObs(t, 5*time.Second, "/locks/u", 1, audit.EventGrant)

	// The client would retry forever; the collector must notice the silence
	// and fail, so the Runner marks the source down and restarts it.
	px.cut()
	err := cr.Failed(t, 20*time.Second)
	if err == nil {
		t.Fatal("Run returned nil while etcd was unreachable, want an error")
	}
	t.Logf("Run failed with: %v", err)

	delRev := unlock(t, cli, m)
	px.restore()
	before := len(sink.allInputs())
	runCollector(t, px.url(), sink, "/locks/")
	rel := sink.waitObs(t, 10*time.Second, "/locks/u", 1, audit.EventRelease)[0]
	if rel.Position != strconv.FormatInt(delRev, 10) {
		t.Fatalf("release at %s, want %d", rel.Position, delRev)
	}
	for _, in := range sink.allInputs()[before:] {
		if in.Blind != nil || in.Snapshot {
			t.Fatalf("input after resume = %+v, want a plain resume: no history was lost", in)
		}
	}
	if n := len(sink.obs("/locks/u", audit.EventGrant)); n != 1 {
		t.Fatalf("%d grants of /locks/u, want 1", n)
	}
}

// TestRestartMidStream stops and restarts the collector while workers keep
// taking and releasing locks, and checks every acquisition the workers saw
// was recorded as exactly one grant and one end, with the token the worker
// would present.
func TestRestartMidStream(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	cr := runCollector(t, ep, sink, "/locks/", "/election/")

	type acquisition struct {
		lock   string
		token  int64
		holder string
	}
	var (
		mu   sync.Mutex
		log  []acquisition
		stop = make(chan struct{})
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	worker := func(id int, names []string) {
		defer wg.Done()
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			errs <- err
			return
		}
		defer s.Close()
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			name := names[rng.IntN(len(names))]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			m := concurrency.NewMutex(s, name)
			if err := m.Lock(ctx); err != nil {
				cancel()
				errs <- fmt.Errorf("worker %d lock %s: %w", id, name, err)
				return
			}
			resp, err := cli.Get(ctx, m.Key())
			if err != nil || len(resp.Kvs) == 0 {
				cancel()
				errs <- fmt.Errorf("worker %d: own key %s: %v", id, m.Key(), err)
				return
			}
			mu.Lock()
			log = append(log, acquisition{name, resp.Kvs[0].CreateRevision, fmt.Sprintf("%x", int64(s.Lease()))})
			mu.Unlock()
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond) // hold it a little
			err = m.Unlock(ctx)
			cancel()
			if err != nil {
				errs <- fmt.Errorf("worker %d unlock %s: %w", id, name, err)
				return
			}
		}
	}
	names := []string{"/locks/w1", "/locks/w2", "/election/w3"}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go worker(i, names)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(log)
	}

	// Three restarts, each after the workers made progress.
	for round := 1; round <= 3; round++ {
		n := count()
		collectortest.Eventually(t, 10*time.Second, "workers to make progress", func() bool { return count() >= n+15 })
		cr.Stop(t)
		n = count()
		collectortest.Eventually(t, 10*time.Second, "workers to make progress while the collector is down", func() bool { return count() >= n+10 })
		cr = runCollector(t, ep, sink, "/locks/", "/election/")
	}
	n := count()
	collectortest.Eventually(t, 10*time.Second, "workers to make progress", func() bool { return count() >= n+15 })
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sink.waitCursor(t, head(t, cli))

	grants := map[string]int{}
	ends := map[string]int{}
	for _, ob := range sink.obs("") {
		k := fmt.Sprintf("%s@%d", ob.Lock.Name, tokenOf(ob))
		switch ob.Kind {
		case audit.EventGrant:
			grants[k]++
			if ob.Inferred {
				t.Errorf("inferred grant %s: nothing was compacted", k)
			}
		case audit.EventRelease, audit.EventExpire:
			ends[k]++
		case audit.EventObserved:
			t.Errorf("observed %s: only the first start may observe, and nothing was held then", k)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range log {
		k := fmt.Sprintf("%s@%d", a.lock, a.token)
		if grants[k] != 1 {
			t.Errorf("acquisition %s by %s recorded as %d grants, want exactly 1", k, a.holder, grants[k])
		}
		if ends[k] != 1 {
			t.Errorf("acquisition %s by %s recorded with %d ends, want exactly 1", k, a.holder, ends[k])
		}
		delete(grants, k)
	}
	for k, n := range grants {
		t.Errorf("grant %s (x%d) that no worker acquired", k, n)
	}
	t.Logf("%d acquisitions across 3 restarts", len(log))
	for _, k := range []audit.FindingKind{audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingOverlap} {
		if f := sink.findingsOf(k); len(f) != 0 {
			t.Errorf("%s findings: %+v", k, f[0])
		}
	}
}
