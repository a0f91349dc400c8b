package redis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncpool "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestRedsyncSingleInstance(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	ctx := context.Background()

	// Held before the collector starts: observed, its grant time unknown.
	if err := cli.Set(ctx, "lock:pre", "early-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk := newSink(t)
	cfg := testConfig(srv)
	// Overlapping patterns: every event arrives twice, once per pattern.
	cfg.Patterns = []string{"lock:*", "lock:o*"}
	runCollector(t, cfg, sk)
	first := sk.Inputs()[0]
	if !first.Snapshot || first.Blind != nil || first.Cursor != seenCursor || !first.ExpireByClock || first.SequentialTokens || first.Kind != audit.KindRedis {
		t.Fatalf("first input = %+v, want a snapshot with the seen cursor and no blind, redis kind, expiry by clock, no sequential tokens", first)
	}
	if len(first.Observations) != 1 || first.Observations[0].Kind != audit.EventObserved || first.Observations[0].Holder != "early-holder" {
		t.Fatalf("first snapshot = %+v, want lock:pre observed held by early-holder", first.Observations)
	}

	rs := redsync.New(redsyncgoredis.NewPool(cli))
	m := rs.NewMutex("lock:orders", redsync.WithExpiry(2*time.Second), redsync.WithTries(1))
	if err := m.Lock(); err != nil {
		t.Fatalf("redsync lock: %v", err)
	}
	g := sk.WaitEvents(t, 5*time.Second, "lock:orders", 1, audit.EventGrant)[0]
	if g.Holder != m.Value() || g.Token != nil || g.Inferred {
		t.Fatalf("grant = %+v, want holder %s, no token, seen", g, m.Value())
	}
	if g.TTL <= time.Second || g.TTL > 2*time.Second+time.Millisecond {
		t.Fatalf("grant TTL = %s, want the 2s redsync set, less the time to read it", g.TTL)
	}
	if f := sk.Findings(t, "lock:orders", audit.FindingUnfencedLock); len(f) != 1 {
		t.Fatalf("unfenced_lock findings = %d, want 1: redsync grants carry no token", len(f))
	}

	waitPTTLBelow(t, cli, "lock:orders", 1800*time.Millisecond)
	if ok, err := m.Extend(); !ok || err != nil {
		t.Fatalf("redsync extend: %v, %v", ok, err)
	}
	r := sk.WaitEvents(t, 5*time.Second, "lock:orders", 1, audit.EventRenew)[0]
	if r.Holder != m.Value() {
		t.Fatalf("renew holder = %s, want %s", r.Holder, m.Value())
	}
	if ok, err := m.Unlock(); !ok || err != nil {
		t.Fatalf("redsync unlock: %v, %v", ok, err)
	}
	rel := sk.WaitEvents(t, 5*time.Second, "lock:orders", 1, audit.EventRelease)[0]
	if rel.Holder != m.Value() || rel.Inferred {
		t.Fatalf("release = %+v, want a seen release by %s", rel, m.Value())
	}

	// A holder that stops renewing: its lease expires.
	m2 := rs.NewMutex("lock:orders", redsync.WithExpiry(300*time.Millisecond), redsync.WithTries(1))
	if err := m2.Lock(); err != nil {
		t.Fatalf("redsync lock: %v", err)
	}
	sk.WaitEvents(t, 5*time.Second, "lock:orders", 1, audit.EventExpire)
	ts := sk.Tenures(t, "lock:orders")
	if len(ts) != 2 {
		t.Fatalf("tenures = %+v, want 2", ts)
	}
	if ts[0].Holder != m.Value() || ts[0].End != audit.EndReleased || ts[0].Renewals != 1 {
		t.Fatalf("first tenure = %+v, want %s released after 1 renewal", ts[0], m.Value())
	}
	if ts[1].Holder != m2.Value() || ts[1].End != audit.EndExpired {
		t.Fatalf("second tenure = %+v, want %s expired", ts[1], m2.Value())
	}
	if f := sk.Findings(t, "lock:orders", audit.FindingLeaseExpired); len(f) != 1 {
		t.Fatalf("lease_expired findings = %d, want 1", len(f))
	}
	if f := sk.Findings(t, "", audit.FindingOverlap); len(f) != 0 {
		t.Fatalf("overlap findings: %+v", f)
	}
	// Redis's own expired event comes later and changes nothing.
	if got := collectortest.Kinds(sk.Events(t, "lock:orders")); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRelease, audit.EventGrant, audit.EventExpire}) {
		t.Fatalf("events = %v", got)
	}
}

func TestRedlockWithOneInstanceDown(t *testing.T) {
	t.Parallel()
	servers := []*redisServer{startRedis(t), startRedis(t), startRedis(t)}
	servers[2].stop()
	sk := newSink(t)
	c, _ := runCollector(t, testConfig(servers...), sk)
	if d := c.Degraded(); !strings.Contains(d, servers[2].sock) || !strings.Contains(d, "unreachable") {
		t.Fatalf("Degraded() = %q, want it to name the unreachable %s", d, servers[2].sock)
	}

	var pools []redsyncpool.Pool
	clis := make([]*goredis.Client, 3)
	for i, s := range servers {
		clis[i] = s.client(t)
		pools = append(pools, redsyncgoredis.NewPool(clis[i]))
	}
	rs := redsync.New(pools...)
	value := func(v string) redsync.Option {
		return redsync.WithGenValueFunc(func() (string, error) { return v, nil })
	}
	ctx := context.Background()

	// Two of three instances: a quorum.
	m1 := rs.NewMutex("lock:red", redsync.WithExpiry(10*time.Second), redsync.WithTries(1), value("holder-1"))
	if err := m1.Lock(); err != nil {
		t.Fatalf("redlock with 2 of 3 instances: %v", err)
	}
	g := sk.WaitEvents(t, 5*time.Second, "lock:red", 1, audit.EventGrant)[0]
	if g.Holder != "holder-1" || g.Detail["instances"] != "2/3" {
		t.Fatalf("grant = %+v, want holder-1 on 2/3 instances", g)
	}
	if ok, err := m1.Unlock(); !ok {
		t.Fatalf("redlock unlock: %v", err)
	}
	sk.WaitEvents(t, 5*time.Second, "lock:red", 1, audit.EventRelease)

	// A leftover on instance 0 lets the next attempt reach only instance 1:
	// no quorum, so redsync deletes its key again. Not a grant.
	if err := clis[0].Set(ctx, "lock:red", "leftover", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	m2 := rs.NewMutex("lock:red", redsync.WithExpiry(10*time.Second), redsync.WithTries(1), value("attempt-2"))
	if err := m2.Lock(); err == nil {
		t.Fatal("redlock with a minority got the lock")
	}
	if err := clis[0].Del(ctx, "lock:red").Err(); err != nil {
		t.Fatal(err)
	}
	m3 := rs.NewMutex("lock:red", redsync.WithExpiry(10*time.Second), redsync.WithTries(1), value("holder-3"))
	if err := m3.Lock(); err != nil {
		t.Fatalf("redlock after the leftover went: %v", err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:red", "holder-3")
	grants := sk.Events(t, "lock:red", audit.EventGrant, audit.EventObserved)
	if got := collectortest.Holders(grants); !slices.Equal(got, []string{"holder-1", "holder-3"}) {
		t.Fatalf("grants to %v, want [holder-1 holder-3]: neither the leftover nor the rolled-back attempt-2 had a quorum", got)
	}
	if got := collectortest.Kinds(sk.Events(t, "lock:red")); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventRelease, audit.EventGrant}) {
		t.Fatalf("events = %v, want grant, release, grant", got)
	}

	// Below the quorum: one instance letting go ends the lock.
	if err := clis[1].Del(ctx, "lock:red").Err(); err != nil {
		t.Fatal(err)
	}
	rel := sk.WaitEvents(t, 5*time.Second, "lock:red", 2, audit.EventRelease)[1]
	if rel.Holder != "holder-3" {
		t.Fatalf("release = %+v, want holder-3's", rel)
	}
}

func TestRedislockObtainRefreshRelease(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	runCollector(t, testConfig(srv), sk)
	ctx := context.Background()

	locker := redislock.New(cli)
	l, err := locker.Obtain(ctx, "lock:job", 2*time.Second, nil)
	if err != nil {
		t.Fatalf("obtain: %v", err)
	}
	g := sk.WaitEvents(t, 5*time.Second, "lock:job", 1, audit.EventGrant)[0]
	if g.Holder != l.Token() {
		t.Fatalf("grant holder = %q, want the lock's token %q", g.Holder, l.Token())
	}
	// A second client is refused: nothing is written, nothing recorded.
	if _, err := locker.Obtain(ctx, "lock:job", 2*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("second obtain = %v, want ErrNotObtained", err)
	}
	waitPTTLBelow(t, cli, "lock:job", 1800*time.Millisecond)
	if err := l.Refresh(ctx, 2*time.Second, nil); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	sk.WaitEvents(t, 5*time.Second, "lock:job", 1, audit.EventRenew)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	sk.WaitEvents(t, 5*time.Second, "lock:job", 1, audit.EventRelease)
	if got := collectortest.Kinds(sk.Events(t, "lock:job")); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRelease}) {
		t.Fatalf("events = %v, want grant, renew, release", got)
	}
}

// Redisson's RLock scripts (RedissonLock.java, RedissonBaseLock.java; see
// collectors/backends.md C.1), replayed with EVAL: a hash whose field is the
// holder (<client UUID>:<thread id>) and whose value is the re-entry count.
var (
	redissonAcquire = goredis.NewScript(`
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
return redis.call('pttl', KEYS[1]);`)
	redissonRenew = goredis.NewScript(`
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return 1;
end;
return 0;`)
	// KEYS: lock, channel, unlock latch; ARGV: message, lease, holder,
	// publish command, latch TTL.
	redissonUnlock = goredis.NewScript(`
local val = redis.call('get', KEYS[3]);
if val ~= false then
  return tonumber(val);
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
  return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
  redis.call('pexpire', KEYS[1], ARGV[2]);
  redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
  return 0;
else
  redis.call('del', KEYS[1]);
  redis.call(ARGV[4], KEYS[2], ARGV[1]);
  redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
  return 1;
end;`)
)

func TestRedissonHashLock(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	runCollector(t, testConfig(srv), sk)
	ctx := context.Background()

	const key, lease = "lock:res", 30000
	const a, b = "7f3c0a52-client-a:1", "b81d44e0-client-b:7"
	acquire := func(holder string) error {
		return redissonAcquire.Run(ctx, cli, []string{key}, lease, holder).Err()
	}
	unlocks := 0
	unlock := func(holder string) {
		t.Helper()
		unlocks++
		latch := fmt.Sprintf("redisson_unlock_latch:{%s}:req-%d", key, unlocks)
		err := redissonUnlock.Run(ctx, cli, []string{key, "redisson_lock__channel:{" + key + "}", latch}, 0, lease, holder, "publish", 3000).Err()
		if err != nil && !errors.Is(err, goredis.Nil) {
			t.Fatalf("unlock: %v", err)
		}
	}

	if err := acquire(a); !errors.Is(err, goredis.Nil) {
		t.Fatalf("acquire = %v, want nil (acquired)", err)
	}
	sk.WaitHeld(t, 5*time.Second, key, a)
	if err := acquire(a); !errors.Is(err, goredis.Nil) { // re-entry: count 2
		t.Fatalf("re-entrant acquire = %v", err)
	}
	if err := acquire(b); err != nil { // held by a: returns the PTTL, writes nothing
		t.Fatalf("contending acquire = %v, want the PTTL", err)
	}
	waitPTTLBelow(t, cli, key, (lease-200)*time.Millisecond)
	if err := redissonRenew.Run(ctx, cli, []string{key}, lease, a).Err(); err != nil {
		t.Fatalf("watchdog renewal: %v", err)
	}
	unlock(a) // count 1: still held
	unlock(a) // count 0: deleted
	if err := acquire(b); !errors.Is(err, goredis.Nil) {
		t.Fatalf("acquire by b = %v", err)
	}
	sk.WaitHeld(t, 5*time.Second, key, b)

	grants := sk.Events(t, key, audit.EventGrant)
	if got := collectortest.Holders(grants); !slices.Equal(got, []string{a, b}) {
		t.Fatalf("grants to %v, want [%s %s]: re-entry is no grant", got, a, b)
	}
	rels := sk.Events(t, key, audit.EventRelease)
	if len(rels) != 1 || rels[0].Holder != a {
		t.Fatalf("releases = %+v, want one, by %s, at the last unlock only", rels, a)
	}
	if len(sk.Events(t, key, audit.EventRenew)) == 0 {
		t.Fatal("no renewal recorded for the watchdog's PEXPIRE")
	}
	ts := sk.Tenures(t, key)
	if len(ts) != 2 || ts[0].End != audit.EndReleased || ts[1].Held() != true {
		t.Fatalf("tenures = %+v, want a's released and b's held", ts)
	}
	if f := sk.Findings(t, key, audit.FindingOverlap); len(f) != 0 {
		t.Fatalf("overlap findings: %+v", f)
	}
	// The unlock latch keys are not locks.
	if l, ok := sk.Lock(t, "redisson_unlock_latch:{lock:res}:req-1"); ok {
		t.Fatalf("latch key recorded as a lock: %+v", l)
	}
}

var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

func TestCounterKeyTokens(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	cfg := testConfig(srv)
	cfg.Token = TokenRule{CounterKey: "{key}:fence"}
	runCollector(t, cfg, sk)
	ctx := context.Background()

	const key, fence = "lock:fenced", "lock:fenced:fence"
	acquire := goredis.NewScript(AcquireScript)
	take := func(holder string) (int64, string) {
		t.Helper()
		tok, err := acquire.Run(ctx, cli, []string{key, fence}, holder, 5000).Int64()
		if err != nil {
			t.Fatalf("acquire script: %v", err)
		}
		return tok, strconv.FormatInt(tok, 10) + ":" + holder
	}
	release := func(value string) {
		t.Helper()
		if n, err := releaseScript.Run(ctx, cli, []string{key}, value).Int(); err != nil || n != 1 {
			t.Fatalf("release %s: %d, %v", value, n, err)
		}
	}

	tok1, v1 := take("worker-a")
	sk.WaitHeld(t, 5*time.Second, key, v1)
	if _, err := acquire.Run(ctx, cli, []string{key, fence}, "worker-b", 5000).Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("acquire while held = %v, want nil (refused)", err)
	}
	release(v1)
	tok2, v2 := take("worker-b")
	sk.WaitHeld(t, 5*time.Second, key, v2)
	release(v2)
	// Grants nobody saw: the counter moved twice behind the collector's back.
	if err := cli.IncrBy(ctx, fence, 2).Err(); err != nil {
		t.Fatal(err)
	}
	tok5, v5 := take("worker-c")
	sk.WaitHeld(t, 5*time.Second, key, v5)
	release(v5)
	sk.WaitEvents(t, 5*time.Second, key, 3, audit.EventRelease)

	if tok1 != 1 || tok2 != 2 || tok5 != 5 {
		t.Fatalf("script tokens = %d, %d, %d, want 1, 2, 5", tok1, tok2, tok5)
	}
	var toks []int64
	for _, g := range sk.Events(t, key, audit.EventGrant) {
		if g.Token == nil {
			t.Fatalf("grant without token: %+v", g)
		}
		toks = append(toks, *g.Token)
	}
	if !slices.Equal(toks, []int64{1, 2, 5}) {
		t.Fatalf("granted tokens = %v, want [1 2 5]", toks)
	}
	for _, in := range sk.Inputs() {
		if !in.SequentialTokens {
			t.Fatalf("input without SequentialTokens under a counter rule: %+v", in)
		}
	}
	skips := sk.Findings(t, key, audit.FindingTokenSkip)
	if len(skips) != 1 || !slices.Equal(skips[0].Tokens, []int64{2, 5}) {
		t.Fatalf("token_skip findings = %+v, want one from 2 to 5", skips)
	}
	if f := sk.Findings(t, key, audit.FindingUnfencedLock); len(f) != 0 {
		t.Fatalf("unfenced_lock under a counter rule: %+v", f)
	}

	// Locked and unlocked in one transaction: by the time the collector
	// reads the key it is gone. A grant to an unknown holder, whose token
	// the counter still tells, and its end.
	_, err := cli.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		acquire.Eval(ctx, p, []string{key, fence}, "worker-d", 5000)
		releaseScript.Eval(ctx, p, []string{key}, "6:worker-d")
		return nil
	})
	if err != nil {
		t.Fatalf("acquire and release in MULTI: %v", err)
	}
	flash := sk.WaitEvents(t, 5*time.Second, key, 4, audit.EventGrant)[3]
	if !flash.Inferred || flash.Holder != "" || flash.Token == nil || *flash.Token != 6 {
		t.Fatalf("grant of a hold never read = %+v, want inferred, holder unknown, token 6", flash)
	}
	if rel := sk.WaitEvents(t, 5*time.Second, key, 4, audit.EventRelease)[3]; rel.Token == nil || *rel.Token != 6 {
		t.Fatalf("its release = %+v", rel)
	}
	if l, ok := sk.Lock(t, fence); ok {
		t.Fatalf("the counter key was recorded as a lock: %+v", l)
	}
}

func TestValuePatternTokens(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	cfg := testConfig(srv)
	cfg.Token = TokenRule{ValuePattern: `^(?P<token>\d+):(?P<holder>.+)$`}
	runCollector(t, cfg, sk)
	ctx := context.Background()

	// The recommended script, with its counter elsewhere: the value carries
	// the token.
	acquire := goredis.NewScript(AcquireScript)
	if err := acquire.Run(ctx, cli, []string{"lock:v", "fence:lock:v"}, "alice", 5000).Err(); err != nil {
		t.Fatal(err)
	}
	l := sk.WaitHeld(t, 5*time.Second, "lock:v", "alice")
	if l.Token == nil || *l.Token != 1 {
		t.Fatalf("lock = %+v, want token 1", l)
	}
	if err := cli.Del(ctx, "lock:v").Err(); err != nil {
		t.Fatal(err)
	}
	// A client that writes a lower token: a regression.
	if err := cli.SetNX(ctx, "lock:v", "0:bob", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:v", "bob")
	reg := sk.Findings(t, "lock:v", audit.FindingTokenRegression)
	if len(reg) != 1 || !slices.Equal(reg[0].Tokens, []int64{1, 0}) {
		t.Fatalf("token_regression findings = %+v, want one from 1 to 0", reg)
	}
	// Only the counter rule promises tokens that rise by one.
	for _, in := range sk.Inputs() {
		if in.SequentialTokens {
			t.Fatal("SequentialTokens under a value_pattern rule")
		}
	}
	// A value the pattern does not match: holder is the whole value, no token.
	if err := cli.Set(ctx, "lock:w", "no-token-here", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	g := sk.WaitEvents(t, 5*time.Second, "lock:w", 1, audit.EventGrant)[0]
	if g.Holder != "no-token-here" || g.Token != nil || g.Detail["token_rule"] == nil {
		t.Fatalf("grant of an unmatched value = %+v", g)
	}
}

func TestPubSubKilledIsBlind(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	// Reconnect slowly enough for the changes below to fall into the gap.
	c, _ := runCollector(t, testConfig(srv), sk, WithReconnectBackoff(time.Second, 2*time.Second))
	ctx := context.Background()

	if err := cli.SetNX(ctx, "lock:k", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:k", "A")
	killed, err := cli.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
	if err != nil || killed < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v", killed, err)
	}
	// While the collector is blind: A unlocks, B locks.
	if err := cli.Del(ctx, "lock:k").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cli.SetNX(ctx, "lock:k", "B", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	blind := sk.WaitEvents(t, 10*time.Second, "lock:k", 1, audit.EventBlind)[0]
	if blind.Detail["from"] == nil || blind.Detail["to"] == nil || !strings.Contains(fmt.Sprint(blind.Detail["reason"]), "lost the connection") {
		t.Fatalf("blind event = %+v, want from, to and the lost connection as reason", blind)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:k", "B")
	evs := sk.Events(t, "lock:k")
	if got := collectortest.Kinds(evs); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventBlind, audit.EventRelease, audit.EventGrant}) {
		t.Fatalf("events = %v, want grant, blind, release (inferred), grant (inferred)", got)
	}
	if !evs[2].Inferred || evs[2].Holder != "A" || !evs[3].Inferred || evs[3].Holder != "B" {
		t.Fatalf("events after the gap = %+v, %+v: want A's end and B's grant, both inferred", evs[2], evs[3])
	}
	if f := sk.Findings(t, "lock:k", audit.FindingBlindWindow); len(f) != 1 {
		t.Fatalf("blind_window findings = %d, want 1", len(f))
	}
	if f := sk.Findings(t, "lock:k", audit.FindingOverlap); len(f) != 0 {
		t.Fatalf("overlap findings across the gap: %+v", f)
	}
	// Watching again: B's release is seen as it happens.
	if err := cli.Del(ctx, "lock:k").Err(); err != nil {
		t.Fatal(err)
	}
	rel := sk.WaitEvents(t, 5*time.Second, "lock:k", 2, audit.EventRelease)[1]
	if rel.Inferred || rel.Holder != "B" {
		t.Fatalf("release after reconnecting = %+v, want B's, seen", rel)
	}
	if d := c.Degraded(); d != "" {
		t.Fatalf("Degraded() = %q after reconnecting", d)
	}
}

func TestServerRestartIsBlind(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	runCollector(t, testConfig(srv), sk)
	ctx := context.Background()

	if err := cli.SetNX(ctx, "lock:r", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:r", "A")
	srv.restart() // no persistence: the lock is gone

	blind := sk.WaitEvents(t, 15*time.Second, "lock:r", 1, audit.EventBlind)[0]
	if !strings.Contains(fmt.Sprint(blind.Detail["reason"]), "restarted") {
		t.Fatalf("blind reason = %v, want the restart named", blind.Detail["reason"])
	}
	ts := sk.Tenures(t, "lock:r")
	if len(ts) != 1 || ts[0].Held() {
		t.Fatalf("tenures = %+v, want A's ended", ts)
	}
	// The new server starts without notifications; the collector enabled
	// them again, so a grant is seen as it happens.
	if err := cli.SetNX(ctx, "lock:r", "B", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	g := sk.WaitEvents(t, 5*time.Second, "lock:r", 2, audit.EventGrant)[1]
	if g.Holder != "B" || g.Inferred {
		t.Fatalf("grant after the restart = %+v, want B's, seen", g)
	}
}

func TestFlushAllCaughtByReconciliation(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	cfg := testConfig(srv)
	cfg.ReconcileInterval = 300 * time.Millisecond
	runCollector(t, cfg, sk)
	ctx := context.Background()

	if err := cli.SetNX(ctx, "lock:f", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:f", "A")
	if err := cli.FlushAll(ctx).Err(); err != nil { // sends no notification
		t.Fatal(err)
	}
	rel := sk.WaitEvents(t, 5*time.Second, "lock:f", 1, audit.EventRelease)[0]
	if !rel.Inferred || rel.Holder != "A" || !strings.Contains(fmt.Sprint(rel.Detail["reason"]), "gone when every key was read again") {
		t.Fatalf("release = %+v, want A's, inferred from a snapshot missing it", rel)
	}
}

func TestEvictionUnderMaxmemory(t *testing.T) {
	t.Parallel()
	srv := startRedis(t, "maxmemory-policy allkeys-lru")
	cli := srv.client(t)
	sk := newSink(t)
	runCollector(t, testConfig(srv), sk)
	ctx := context.Background()

	if err := cli.SetNX(ctx, "lock:e", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:e", "A")
	used := usedMemory(t, cli)
	if err := cli.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+2<<20, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	fill := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		n, err := cli.Exists(ctx, "lock:e").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i > 2000 {
			t.Fatal("the lock was never evicted")
		}
		if err := cli.Set(ctx, fmt.Sprintf("fill:%d", i), fill, 0).Err(); err != nil && !strings.HasPrefix(err.Error(), "OOM") {
			t.Fatal(err)
		}
	}
	exp := sk.WaitEvents(t, 5*time.Second, "lock:e", 1, audit.EventExpire)[0]
	if exp.Holder != "A" || exp.Inferred {
		t.Fatalf("expire = %+v, want A's, seen", exp)
	}
	ev := sk.Findings(t, "lock:e", audit.FindingLockEvicted)
	if len(ev) != 1 || !slices.Equal(ev[0].Holders, []string{"A"}) {
		t.Fatalf("lock_evicted findings = %+v, want one naming A", ev)
	}
}

func usedMemory(t *testing.T, cli *goredis.Client) int64 {
	t.Helper()
	info, err := cli.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

func TestNotificationsEnabledByTheCollector(t *testing.T) {
	t.Parallel()
	// Someone else's flags (keyevent channels, list events) must survive.
	// Over TCP this time.
	port := freePort(t)
	srv := startRedis(t, "notify-keyspace-events El", "port "+port, "bind 127.0.0.1")
	cli := srv.client(t)
	ctx := context.Background()
	sk := newSink(t)
	cfg := testConfig()
	cfg.Addrs = []string{"127.0.0.1:" + port}
	c, _ := runCollector(t, cfg, sk)

	flags, err := cli.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := flags["notify-keyspace-events"]
	if missingFlags(got) != "" || !strings.ContainsRune(got, 'E') || !strings.ContainsRune(got, 'l') {
		t.Fatalf("notify-keyspace-events = %q, want K, g, $, h, x, e added to E and l", got)
	}
	if d := c.Degraded(); d != "" {
		t.Fatalf("Degraded() = %q, want \"\"", d)
	}
	if err := cli.SetNX(ctx, "lock:n", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if g := sk.WaitEvents(t, 5*time.Second, "lock:n", 1, audit.EventGrant)[0]; g.Holder != "A" || g.Inferred {
		t.Fatalf("grant = %+v, want A's, seen", g)
	}
}

func TestConfigDeniedPolls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		conf string
	}{
		{"RenamedCommand", `rename-command CONFIG ""`},
		{"DeniedByACL", "user default on nopass ~* &* +@all -config"},
		// CONFIG allowed (the flags get set), but no channels to subscribe to.
		{"PubSubDeniedByACL", "user default on nopass ~* resetchannels +@all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := startRedis(t, tt.conf)
			cli := srv.client(t)
			ctx := context.Background()
			sk := newSink(t)
			c, _ := runCollector(t, testConfig(srv), sk)
			if d := c.Degraded(); !strings.Contains(d, "polling every 100ms") {
				t.Fatalf("Degraded() = %q, want it to say the source is polled", d)
			}

			if err := cli.SetNX(ctx, "lock:p", "A", 800*time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			g := sk.WaitEvents(t, 5*time.Second, "lock:p", 1, audit.EventGrant)[0]
			if g.Holder != "A" || g.TTL <= 0 || g.TTL > 801*time.Millisecond {
				t.Fatalf("polled grant = %+v, want A's with its TTL", g)
			}
			sk.WaitEvents(t, 5*time.Second, "lock:p", 1, audit.EventExpire)
			if ts := sk.Tenures(t, "lock:p"); len(ts) != 1 || ts[0].End != audit.EndExpired {
				t.Fatalf("tenures = %+v, want A's expired", ts)
			}
			if f := sk.Findings(t, "lock:p", audit.FindingLeaseExpired); len(f) != 1 {
				t.Fatalf("lease_expired findings = %d, want 1", len(f))
			}

			// A release between polls.
			if err := cli.SetNX(ctx, "lock:p", "B", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			sk.WaitHeld(t, 5*time.Second, "lock:p", "B")
			if err := cli.Del(ctx, "lock:p").Err(); err != nil {
				t.Fatal(err)
			}
			rel := sk.WaitEvents(t, 5*time.Second, "lock:p", 1, audit.EventRelease)[0]
			if rel.Holder != "B" {
				t.Fatalf("release = %+v, want B's", rel)
			}
		})
	}
}

func TestClockExpiresBeforeLazyExpiredEvent(t *testing.T) {
	t.Parallel()
	srv := startRedis(t, "enable-debug-command local")
	cli := srv.client(t)
	ctx := context.Background()
	// No active expiry: Redis reclaims a key, and sends expired, only when
	// something touches it.
	if err := cli.Do(ctx, "debug", "set-active-expire", "0").Err(); err != nil {
		t.Fatal(err)
	}
	sk := newSink(t)
	runCollector(t, testConfig(srv), sk)

	setStart := time.Now()
	if err := cli.SetNX(ctx, "lock:lazy", "A", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	setDone := time.Now()
	sk.WaitEvents(t, 5*time.Second, "lock:lazy", 1, audit.EventGrant)
	exp := sk.WaitEvents(t, 5*time.Second, "lock:lazy", 1, audit.EventExpire)[0]
	if !exp.Inferred || exp.Holder != "A" {
		t.Fatalf("expire = %+v, want A's, by the tracker's clock", exp)
	}
	// The deadline is the read's reply time plus PTTL: never before the
	// server's, and not much after.
	if early := setStart.Add(300 * time.Millisecond).Sub(exp.At); early > 0 {
		t.Fatalf("expired %s before the server's deadline", early)
	}
	if late := exp.At.Sub(setDone.Add(300 * time.Millisecond)); late > 100*time.Millisecond {
		t.Fatalf("expired %s after the server's deadline", late)
	}
	live := false
	for _, in := range sk.Inputs() {
		live = live || (in.Live && !in.At.Before(exp.At))
	}
	if !live {
		t.Fatal("no Live input vouched for the time of the expiry")
	}
	// Touching the key makes Redis reclaim it and send expired: the tracker
	// already ended the tenure, so nothing more is recorded.
	if n, err := cli.Exists(ctx, "lock:lazy").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS = %d, %v", n, err)
	}
	if err := cli.SetNX(ctx, "lock:lazy", "B", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:lazy", "B")
	if got := collectortest.Kinds(sk.Events(t, "lock:lazy")); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventExpire, audit.EventGrant}) {
		t.Fatalf("events = %v, want grant, expire, grant", got)
	}
}

func TestRunGivesUpAndRestartsBlind(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	ctx := context.Background()
	sk := newSink(t)
	c, err := New(testConfig(srv), collectortest.Logger(t, testSource), WithGiveUpAfter(300*time.Millisecond), WithReconnectBackoff(50*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	run := collectortest.Run(t, c, sk)
	if err := cli.SetNX(ctx, "lock:x", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:x", "A")
	srv.stop()
	if err := run.Failed(t, 10*time.Second); err == nil {
		t.Fatal("Run returned nil with redis gone")
	}
	before := len(sk.Inputs())

	// What the Runner does: run the same collector again.
	srv.start()
	if err := cli.SetNX(ctx, "lock:x", "B", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	collectortest.Run(t, c, sk) // stopped, and Run's nil checked, when the test ends
	first := sk.Inputs()[before]
	if !first.Snapshot || first.Blind == nil || !strings.Contains(first.Blind.Reason, "restarted") {
		t.Fatalf("first input of the new run = %+v, want a snapshot after a blind window naming the restart", first)
	}
	if len(first.Observations) != 1 || first.Observations[0].Kind != audit.EventGrant || !first.Observations[0].Inferred || first.Observations[0].Holder != "B" {
		t.Fatalf("snapshot = %+v, want B's grant, inferred", first.Observations)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:x", "B")
	if got := collectortest.Kinds(sk.Events(t, "lock:x")); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventBlind, audit.EventRelease, audit.EventGrant}) {
		t.Fatalf("events = %v, want grant, blind, release (inferred), grant (inferred)", got)
	}
}

func TestUnreachableAtFirstThenObserved(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	srv.stop()
	cli := srv.client(t)
	ctx := context.Background()
	sk := newSink(t)
	c, err := New(testConfig(srv), collectortest.Logger(t, testSource))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx, sk, func() { t.Error("ready with redis down") }); err == nil {
		t.Fatal("Run returned nil with redis down")
	}
	srv.start()
	if err := cli.SetNX(ctx, "lock:u", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// The Runner's restart: the source is seen for the first time, so what
	// it holds was held before the collector saw it, not granted unseen.
	collectortest.Run(t, c, sk)
	ev := sk.WaitEvents(t, 10*time.Second, "lock:u", 1)[0]
	if ev.Kind != audit.EventObserved || ev.Inferred {
		t.Fatalf("first event = %+v, want observed", ev)
	}
	if in := sk.Inputs()[0]; in.Blind != nil {
		t.Fatalf("first input has a blind window %+v: nothing was seen before it", in.Blind)
	}
}

// A new leasewatch process on the same database cannot replay what Redis did
// while nothing watched it: that time is a blind window, and the state after
// it is reconciled with inferred transitions.
func TestLeasewatchRestartIsBlind(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	ctx := context.Background()
	sk := newSink(t)
	_, run := runCollector(t, testConfig(srv), sk)
	if err := cli.SetNX(ctx, "lock:x", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:x", "A")
	run.Stop(t)

	// While leasewatch is down, A releases and B takes the lock.
	if err := cli.Del(ctx, "lock:x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cli.SetNX(ctx, "lock:x", "B", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	runCollector(t, testConfig(srv), sk) // a new Collector: a new process
	sk.WaitHeld(t, 5*time.Second, "lock:x", "B")
	if got := sk.Events(t, "lock:x", audit.EventBlind); len(got) != 1 {
		t.Fatalf("blind events = %d, want 1 for the time leasewatch was down", len(got))
	}
	grants := sk.Events(t, "lock:x", audit.EventGrant)
	if last := grants[len(grants)-1]; last.Holder != "B" || !last.Inferred {
		t.Fatalf("last grant = %+v, want B's, inferred", last)
	}
}

// TestScriptAndMultiReadsAgree reads the same keys with readScript and with
// the MULTI of plain commands a user without scripting gets, on a real
// server: every kind of key must read the same both ways.
func TestScriptAndMultiReadsAgree(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	ctx := context.Background()
	for _, cmd := range [][]any{
		{"set", "lock:s", "owner-1", "px", 60000},
		{"set", "lock:s:fence", "17"},
		{"hset", "lock:h", "c0ffee:1", "2"},
		{"pexpire", "lock:h", 60000},
		{"set", "lock:forever", "x"},
		{"rpush", "lock:list", "a"},
		{"set", "lock:odd", "y"},
		{"hset", "lock:odd:fence", "f", "v"}, // a counter key of the wrong type
	} {
		if err := cli.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	keys := []string{"lock:s", "lock:h", "lock:forever", "lock:list", "lock:odd", "lock:missing"}
	for _, rule := range []TokenRule{{}, {CounterKey: "{key}:fence"}} {
		cfg := testConfig(srv)
		cfg.Token = rule
		c, err := New(cfg, collectortest.Logger(t, testSource))
		if err != nil {
			t.Fatal(err)
		}
		in := &instance{c: c, addr: srv.sock, client: c.client(srv.sock), log: collectortest.Logger(t, testSource)}
		defer in.client.Close()
		byScript, err := in.readByScript(ctx, keys)
		if err != nil {
			t.Fatalf("readByScript: %v", err)
		}
		byMulti, err := in.readByMulti(ctx, keys)
		if err != nil {
			t.Fatalf("readByMulti: %v", err)
		}
		for i := range keys {
			s, m := byScript[i], byMulti[i]
			// Only the script reads the server's own deadline.
			if wantDeadline := s.PTTL >= 0; (s.Deadline != 0) != wantDeadline ||
				(wantDeadline && (s.Deadline < s.Sent.Add(time.Duration(s.PTTL)*time.Millisecond-time.Second).UnixMilli() ||
					s.Deadline > s.At.Add(time.Duration(s.PTTL)*time.Millisecond+time.Second).UnixMilli())) {
				t.Errorf("rule %+v, %s: deadline %d with PTTL %d read between %s and %s", rule, keys[i], s.Deadline, s.PTTL, s.Sent, s.At)
			}
			s.Deadline = 0
			s.Sent, s.At, m.Sent, m.At = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			// The two reads are moments apart: PTTLs may differ a little.
			if d := s.PTTL - m.PTTL; d > 50 || d < -50 {
				t.Errorf("rule %+v, %s: PTTL %d by script, %d by MULTI", rule, keys[i], s.PTTL, m.PTTL)
			}
			s.PTTL, m.PTTL = 0, 0
			if !reflect.DeepEqual(s, m) {
				t.Errorf("rule %+v, %s:\n by script %+v\n by MULTI  %+v", rule, keys[i], s, m)
			}
		}
		if c := byScript[0].Counter; (rule.CounterKey != "") != (c != nil && *c == 17) {
			t.Errorf("rule %+v: counter of lock:s = %v", rule, c)
		}
	}
}

// TestScriptsDeniedReadsWithMulti runs the collector as a user whose ACL
// forbids scripts: it reads with MULTI instead and still records grants with
// their counter tokens.
func TestScriptsDeniedReadsWithMulti(t *testing.T) {
	t.Parallel()
	srv := startRedis(t, "user default on nopass ~* &* +@all -@scripting")
	cli := srv.client(t)
	sk := newSink(t)
	cfg := testConfig(srv)
	cfg.Token = TokenRule{CounterKey: "{key}:fence"}
	c, _ := runCollector(t, cfg, sk)
	ctx := context.Background()
	if err := cli.Incr(ctx, "lock:m:fence").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cli.SetNX(ctx, "lock:m", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	g := sk.WaitEvents(t, 5*time.Second, "lock:m", 1, audit.EventGrant)[0]
	if g.Holder != "A" || g.Token == nil || *g.Token != 1 {
		t.Fatalf("grant = %+v, want A's with token 1", g)
	}
	if d := c.Degraded(); d != "" {
		t.Fatalf("Degraded() = %q: reading without scripts sees everything", d)
	}
}

// stallingSink holds every input while stalled, as a recorder held up by a
// slow disk does.
type stallingSink struct {
	*collectortest.Sink
	stalled atomic.Bool
	release chan struct{}
}

func (s *stallingSink) wait() {
	if s.stalled.Load() {
		<-s.release
	}
}

func (s *stallingSink) Record(ctx context.Context, in audit.Input) error {
	s.wait()
	return s.Sink.Record(ctx, in)
}

func (s *stallingSink) Submit(ctx context.Context, in audit.Input) func() error {
	s.wait()
	return s.Sink.Submit(ctx, in)
}

// A collector held up longer than deadAfter by its own sink has heard
// nothing in that time, but the connection is fine: it must not call the
// connection dead, drop the notifications waiting on it and go blind.
func TestStalledSinkIsNotBlind(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	cli := srv.client(t)
	sk := &stallingSink{Sink: newSink(t), release: make(chan struct{})}
	runCollector(t, testConfig(srv), sk)
	ctx := context.Background()

	if err := cli.SetNX(ctx, "lock:k", "A", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	sk.WaitHeld(t, 5*time.Second, "lock:k", "A")
	sk.stalled.Store(true)
	if err := cli.Del(ctx, "lock:k").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cli.SetNX(ctx, "lock:k", "B", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// The stall itself is what is under test: longer than deadAfter.
	time.Sleep(deadAfter + time.Second)
	sk.stalled.Store(false)
	close(sk.release)
	released := time.Now()

	sk.WaitHeld(t, 5*time.Second, "lock:k", "B")
	// A connection wrongly called dead would be replaced within a ping or
	// two, and its blind window recorded before the new connection vouches
	// for anything after that.
	collectortest.Eventually(t, 5*time.Second, "the collector to vouch for the time after the stall", func() bool {
		for _, in := range sk.Inputs() {
			if in.Live && in.At.After(released.Add(4*pingInterval)) {
				return true
			}
		}
		return false
	})
	evs := sk.Events(t, "lock:k")
	if got := collectortest.Kinds(evs); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventRelease, audit.EventGrant}) {
		t.Fatalf("events = %v, want grant, release, grant: nothing blind", got)
	}
	for _, e := range evs {
		if e.Inferred {
			t.Fatalf("event %+v inferred, want every change seen", e)
		}
	}
	if f := sk.Findings(t, "lock:k", audit.FindingBlindWindow); len(f) != 0 {
		t.Fatalf("blind_window findings = %+v, want none", f)
	}
}
