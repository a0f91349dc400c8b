package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

const (
	// readChunk bounds the keys read in one MULTI.
	readChunk = 256
	// maxBatch bounds the notifications folded into one round of reads.
	maxBatch  = 1024
	scanCount = 1000
	// A periodic reconciliation reads a SCAN page every passStep, between
	// batches of notifications, sized so that the pass takes about half
	// the reconcile interval: the stream is never held up, and a busy
	// collector gets a little more work for a while rather than a burst it
	// takes seconds to work off (at 10,000 keys and 30 s, about 35 keys a
	// step, 700 reads a second).
	passStep     = 50 * time.Millisecond
	minPassCount = 10
)

// msgKind says what an instance reports to the run.
type msgKind int

const (
	msgScan   msgKind = iota // every matching key, read after (re)connecting, after a blind window, or as a poll
	msgEvents                // notifications and the reads that followed them
	msgPass                  // one SCAN page of a periodic reconciliation, read
	msgDown                  // the connection was lost or could not be made
)

// instMsg is what an instance's goroutine reports to the run, which owns all
// lock state.
type instMsg struct {
	inst int
	kind msgKind
	at   time.Time

	scan  []reading    // msgScan: every lock key present; msgPass: the page's keys, present or not
	blind *audit.Blind // msgScan: what the instance could not see before it
	first bool         // msgScan: the first scan of a connection
	poll  bool         // msgScan: a poll, worth recording only if something changed

	batch []keyEvents // msgEvents
	// live (msgScan, msgEvents): every change on the instance up to then
	// has been read and reported, with this message or before it.
	live time.Time
	// behind (msgEvents): the latest PING round trip on the pub/sub
	// connection, how long notifications wait before the collector
	// reads them.
	behind time.Duration

	// seen and since (the last msgPass of a pass): every key the pass
	// found, and when it began.
	seen  map[string]bool
	since time.Time

	err  error     // msgDown
	from time.Time // msgDown: the last moment the instance was seen
}

// pass is a periodic reconciliation in progress. It reads one SCAN page per
// step and reports it in order with the notifications, so each page is
// judged as a whole scan would be; at the end, a key the pass never found
// that no notification touched since it began is gone (FLUSHALL, FLUSHDB).
type pass struct {
	started time.Time
	count   int64 // SCAN's COUNT hint
	pattern int   // index into the source's patterns
	cursor  uint64
	seen    map[string]bool
}

// newPass begins a pass over about keys keys, paced to take half of every.
func newPass(now time.Time, keys int, every time.Duration) *pass {
	steps := max(1, int64(every/2/passStep))
	return &pass{started: now, count: max(minPassCount, int64(keys)/steps), seen: make(map[string]bool)}
}

// keyEvents is the notifications received for one key and the read that
// followed them.
type keyEvents struct {
	key    string
	events []event
	rd     reading
}

// instance observes one Redis instance: it only moves data, from the
// notifications and reads to the run.
type instance struct {
	c      *Collector
	idx    int
	addr   string
	client *goredis.Client
	log    *slog.Logger
	out    chan<- instMsg
	prefix string // the keyspace channel prefix, __keyspace@<db>__:

	// What the next connection's first scan must report as blind: from when,
	// and why.
	blindFrom   time.Time
	blindReason string
	runID       string // the server's run_id as last seen
	lastSeen    time.Time
	dups        dedup         // of the current connection
	behind      time.Duration // the latest PING round trip of the current connection
	keys        int           // how many keys the last whole scan or periodic pass found
	// noScript is why reads fall back from readScript to a MULTI of plain
	// commands (scripting denied to the user), or "".
	noScript string
}

// dedup drops the copies of a notification that overlapping patterns
// deliver: the server sends one event to each matching pattern in a row, so
// a message for the same channel and event from a pattern not yet seen in
// the current run is a copy. One from a pattern already seen is a new event.
type dedup struct {
	channel, payload string
	patterns         []string
}

func (d *dedup) dup(channel, payload, pattern string) bool {
	if channel == d.channel && payload == d.payload {
		seen := false
		for _, p := range d.patterns {
			seen = seen || p == pattern
		}
		if !seen {
			d.patterns = append(d.patterns, pattern)
			return true
		}
	}
	d.channel, d.payload, d.patterns = channel, payload, append(d.patterns[:0], pattern)
	return false
}

func (in *instance) now() time.Time { return in.c.now() }

// loop connects and observes until ctx ends, reconnecting with the
// Runner's backoff (collectors.Backoff, jittered so that instances lost
// together do not all dial at once): from reconnectMin doubling up to
// reconnectMax, and from reconnectMin again once a session was up.
func (in *instance) loop(ctx context.Context) {
	attempt := 0
	for {
		up, err := in.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if up {
			attempt = 0
		}
		delay := collectors.Backoff(in.c.reconnectMin, in.c.reconnectMax, attempt, rand.Float64())
		attempt++
		from := in.lastSeen
		if in.blindFrom.IsZero() {
			// Never seen in this process: blind from now on, until it is.
			in.blindFrom, in.blindReason = in.now(), fmt.Sprintf("redis at %s was unreachable: %v", in.addr, err)
			from = in.blindFrom
		}
		in.log.Warn("redis connection lost; reconnecting", "err", err, "retry_in", delay)
		if !in.send(ctx, instMsg{kind: msgDown, at: in.now(), err: err, from: from}) {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (in *instance) send(ctx context.Context, m instMsg) bool {
	m.inst = in.idx
	select {
	case in.out <- m:
		return true
	case <-ctx.Done():
		return false
	}
}

// lost records that the connection, last seen at from, failed with err, and
// returns err.
func (in *instance) lost(from time.Time, err error) error {
	if in.blindFrom.IsZero() {
		in.blindFrom = from
		in.blindReason = fmt.Sprintf("lost the connection to redis at %s: %v", in.addr, err)
	}
	return err
}

// takeBlind returns the blind window a (re)connection ends at to, naming a
// server restart if the run_id changed.
func (in *instance) takeBlind(to time.Time, runID string) *audit.Blind {
	var b *audit.Blind
	restarted := in.runID != "" && runID != in.runID
	if !in.blindFrom.IsZero() || restarted {
		from, reason := in.blindFrom, in.blindReason
		if from.IsZero() {
			from = in.lastSeen
		}
		if restarted {
			reason = fmt.Sprintf("redis at %s restarted (run_id %s, was %s): keys may have vanished unseen", in.addr, short(runID), short(in.runID))
		}
		b = &audit.Blind{From: from, To: to, Reason: reason}
	}
	in.blindFrom, in.blindReason = time.Time{}, ""
	in.runID = runID
	in.c.mu.Lock()
	in.c.runIDs[in.idx] = runID
	in.c.mu.Unlock()
	return b
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// session runs one connection: check the notification settings, subscribe,
// scan, then follow notifications (or poll) until the connection fails.
// up reports whether it got as far as its first scan.
func (in *instance) session(ctx context.Context) (up bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()

	runID, err := in.serverRunID(sctx)
	if err != nil {
		return false, in.lost(in.lastSeen, err)
	}
	polling, err := in.ensureNotifications(sctx)
	if err != nil {
		return false, in.lost(in.lastSeen, err)
	}
	if polling != "" {
		in.c.setMode(in.idx, polling)
		return in.poll(sctx, runID)
	}
	in.c.setMode(in.idx, "")

	ps := in.client.PSubscribe(sctx)
	var wg sync.WaitGroup
	defer func() {
		ps.Close()
		cancel()
		wg.Wait()
	}()
	in.dups, in.behind = dedup{}, 0
	if err := in.subscribe(sctx, ps); err != nil {
		if isConnErr(err) {
			return false, in.lost(in.lastSeen, err)
		}
		// Refused (an ACL without the channels): poll instead.
		ps.Close()
		in.c.setMode(in.idx, in.pollReason("PSUBSCRIBE", err))
		return in.poll(sctx, runID)
	}
	// Subscribed: from here on every change reaches the stream, so a scan
	// now leaves no change unseen.
	var heard, taken atomic.Int64
	heard.Store(in.now().UnixNano())
	recv := make(chan received, maxBatch)
	wg.Add(1)
	go func() {
		defer wg.Done()
		in.receive(sctx, ps, recv, &heard, &taken)
	}()

	if err := in.scanAndSend(sctx, runID, true, false); err != nil {
		return false, err
	}
	in.c.setReach(in.idx, "")
	flagsOK := in.now()

	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	var pings []time.Time // when each PING not yet answered was sent, oldest first
	reconcile := time.NewTicker(in.c.cfg.ReconcileInterval)
	defer reconcile.Stop()
	step := time.NewTicker(passStep)
	defer step.Stop()
	var p *pass
	for {
		select {
		case <-sctx.Done():
			return true, nil
		case r := <-recv:
			batch := []received{r}
		drain:
			for len(batch) < maxBatch && r.err == nil {
				select {
				case r = <-recv:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			if err := in.handle(sctx, batch, &pings); err != nil {
				return true, in.lost(in.lastSeen, err)
			}
		case <-ping.C:
			seen := in.lastSeen
			// The silence must be the connection's, not ours: dead means
			// a PING unanswered for deadAfter with nothing read or taken
			// meanwhile. While handle works through a backlog (or the
			// recorder holds it up), notifications wait in recv, receive
			// waits to hand one over (taken marks when it last could),
			// and no PING goes out; dropping the connection then would
			// lose the backlog and add a full scan to the load that made
			// it.
			quiet := in.now().Sub(time.Unix(0, max(heard.Load(), taken.Load())))
			if quiet > deadAfter && len(recv) == 0 && len(pings) > 0 && in.now().Sub(pings[0]) > deadAfter {
				return true, in.lost(seen, fmt.Errorf("no word on the pub/sub connection for %s", quiet.Round(time.Millisecond)))
			}
			if len(pings) > int(deadAfter/pingInterval) {
				continue // unanswered: the quiet check above ends it
			}
			pings = append(pings, in.now())
			if err := ps.Ping(sctx); err != nil {
				return true, in.lost(seen, fmt.Errorf("ping the pub/sub connection: %w", err))
			}
		case <-reconcile.C:
			seen := in.lastSeen
			id, err := in.serverRunID(sctx)
			if err != nil {
				return true, in.lost(seen, err)
			}
			current, err := in.flags(sctx)
			if err == nil && missingFlags(current) != "" {
				// Someone switched notifications off: whatever changed
				// since they were last seen on went unreported.
				if in.blindFrom.IsZero() {
					in.blindFrom, in.blindReason = flagsOK, fmt.Sprintf("keyspace notifications were switched off on redis at %s", in.addr)
				}
				if _, err := in.ensureNotifications(sctx); err != nil {
					return true, in.lost(seen, err)
				}
			}
			flagsOK = in.now()
			if !in.blindFrom.IsZero() || id != in.runID {
				// Blind since the last look: a whole scan, recorded as a
				// snapshot after the blind window.
				p = nil
				if err := in.scanAndSend(sctx, id, false, false); err != nil {
					return true, err
				}
			} else if p == nil {
				p = newPass(in.now(), in.keys, in.c.cfg.ReconcileInterval)
			}
		case <-step.C:
			if p == nil {
				continue
			}
			done, err := in.passStep(sctx, p)
			if err != nil {
				return true, err
			}
			if done {
				p = nil
			}
		}
	}
}

// passStep reads and reports the next SCAN page of p, and reports whether
// that was its last.
func (in *instance) passStep(ctx context.Context, p *pass) (done bool, err error) {
	pattern := in.c.cfg.Patterns[p.pattern]
	cctx, cancel := context.WithTimeout(ctx, in.c.cfg.DialTimeout)
	page, next, err := in.client.Scan(cctx, p.cursor, pattern, p.count).Result()
	cancel()
	if err != nil {
		return false, in.lost(in.lastSeen, fmt.Errorf("redis at %s: SCAN %q: %w", in.addr, pattern, err))
	}
	var keys []string
	for _, k := range page {
		if !p.seen[k] && !in.c.rule.isCounterKey(k) {
			p.seen[k] = true
			keys = append(keys, k)
		}
	}
	rds, err := in.read(ctx, keys)
	if err != nil {
		return false, in.lost(in.lastSeen, err)
	}
	if p.cursor = next; next == 0 {
		p.pattern++
	}
	m := instMsg{kind: msgPass, at: in.now(), scan: rds}
	if done = p.pattern == len(in.c.cfg.Patterns); done {
		m.seen, m.since = p.seen, p.started
		in.keys = len(p.seen)
	}
	if !in.send(ctx, m) {
		return false, ctx.Err()
	}
	return done, nil
}

// poll is a session without notifications: every PollInterval it reads
// every matching key.
func (in *instance) poll(ctx context.Context, runID string) (bool, error) {
	if err := in.scanAndSend(ctx, runID, true, false); err != nil {
		return false, err
	}
	in.c.setReach(in.idx, "")
	t := time.NewTicker(in.c.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-t.C:
			id, err := in.serverRunID(ctx)
			if err != nil {
				return true, in.lost(in.lastSeen, err)
			}
			if err := in.scanAndSend(ctx, id, false, true); err != nil {
				return true, err
			}
		}
	}
}

// scanAndSend reads every matching key and reports it, with the blind window
// that ends here, if any. The scan shows every change up to its start.
func (in *instance) scanAndSend(ctx context.Context, runID string, first, poll bool) error {
	started := in.now()
	rds, err := in.scan(ctx)
	if err != nil {
		return in.lost(in.lastSeen, err)
	}
	at := in.now()
	in.keys = len(rds)
	blind := in.takeBlind(started, runID)
	in.lastSeen = started // the scan shows every change up to its start
	if !in.send(ctx, instMsg{kind: msgScan, at: at, scan: rds, blind: blind, first: first, poll: poll && blind == nil, live: started}) {
		return ctx.Err()
	}
	return nil
}

// received is one item from the pub/sub connection.
type received struct {
	msg any // *goredis.Message, *goredis.Pong, *goredis.Subscription
	err error
	at  time.Time
}

// receive reads the pub/sub connection until it fails. go-redis would
// reconnect and resubscribe on its own and hide the gap; the session closes
// the connection on the first error instead, and scans after reconnecting.
// heard is when it last read a message; taken, when the session last took
// one from it.
func (in *instance) receive(ctx context.Context, ps *goredis.PubSub, out chan<- received, heard, taken *atomic.Int64) {
	for {
		msg, err := ps.Receive(ctx)
		at := in.now()
		if err == nil {
			heard.Store(at.UnixNano())
		}
		select {
		case out <- received{msg: msg, err: err, at: at}:
			taken.Store(in.now().UnixNano())
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// handle reads the keys a batch of notifications names and reports them.
// A PONG in the batch answers the oldest of pings: everything published
// before that PING was sent is in the batch or before it.
func (in *instance) handle(ctx context.Context, batch []received, pings *[]time.Time) error {
	var out []keyEvents // one per key, in the order of their first notification
	byKey := make(map[string]int, len(batch))
	var failed error
	var live time.Time
	for _, r := range batch {
		if r.err != nil {
			failed = r.err
			break
		}
		if _, ok := r.msg.(*goredis.Pong); ok && len(*pings) > 0 {
			live, *pings = (*pings)[0], (*pings)[1:]
			in.behind = r.at.Sub(live)
			continue
		}
		m, ok := r.msg.(*goredis.Message)
		if !ok || in.dups.dup(m.Channel, m.Payload, m.Pattern) {
			continue // a subscription confirmation, or one event again for another pattern
		}
		key, ok := strings.CutPrefix(m.Channel, in.prefix)
		if !ok || in.c.rule.isCounterKey(key) {
			continue
		}
		i, ok := byKey[key]
		if !ok {
			if out == nil {
				out = make([]keyEvents, 0, len(batch))
			}
			i = len(out)
			byKey[key] = i
			out = append(out, keyEvents{key: key})
		}
		out[i].events = append(out[i].events, event{Name: m.Payload, At: r.at})
	}
	if len(out) == 0 && live.IsZero() {
		return failed
	}
	order := make([]string, len(out))
	for i := range out {
		order[i] = out[i].key
	}
	rds, err := in.read(ctx, order)
	if err != nil {
		return err
	}
	for i := range out {
		out[i].rd = rds[i]
	}
	if !in.send(ctx, instMsg{kind: msgEvents, at: in.now(), batch: out, live: live, behind: in.behind}) {
		return ctx.Err()
	}
	if !live.IsZero() {
		// Seen up to the answered PING's sending, not to when its PONG or
		// any notification was read: what the server did after sending
		// them may still be on its way.
		in.lastSeen = live
	}
	return failed
}

// subscribe subscribes to the keyspace channels of every pattern and waits
// until the server confirms each.
func (in *instance) subscribe(ctx context.Context, ps *goredis.PubSub) error {
	channels := make([]string, 0, len(in.c.cfg.Patterns))
	want := make(map[string]bool)
	for _, p := range in.c.cfg.Patterns {
		ch := in.prefix + p
		if !want[ch] {
			want[ch] = true
			channels = append(channels, ch)
		}
	}
	if err := ps.PSubscribe(ctx, channels...); err != nil {
		return fmt.Errorf("psubscribe %v: %w", channels, err)
	}
	// A refusal (NOPERM) comes back as the reply in place of a confirmation.
	deadline := in.now().Add(in.c.cfg.DialTimeout)
	for len(want) > 0 {
		left := deadline.Sub(in.now())
		if left <= 0 {
			return fmt.Errorf("psubscribe %v: no confirmation within %s", channels, in.c.cfg.DialTimeout)
		}
		msg, err := ps.ReceiveTimeout(ctx, left)
		if err != nil {
			return fmt.Errorf("psubscribe %v: %w", channels, err)
		}
		if s, ok := msg.(*goredis.Subscription); ok && s.Kind == "psubscribe" {
			delete(want, s.Channel)
		}
	}
	return nil
}

// serverRunID returns the server's run_id (INFO server), which changes when
// it restarts.
func (in *instance) serverRunID(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, in.c.cfg.DialTimeout)
	defer cancel()
	info, err := in.client.Info(cctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("redis at %s: INFO server: %w", in.addr, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// flags returns the server's notify-keyspace-events.
func (in *instance) flags(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, in.c.cfg.DialTimeout)
	defer cancel()
	m, err := in.client.ConfigGet(cctx, "notify-keyspace-events").Result()
	if err != nil {
		return "", err
	}
	v, ok := m["notify-keyspace-events"]
	if !ok {
		return "", errors.New("CONFIG GET notify-keyspace-events returned nothing")
	}
	return v, nil
}

// ensureNotifications makes sure the server publishes the keyspace
// notifications the collector needs, adding the missing flags to the
// server's own. Where CONFIG is not permitted (renamed, or denied by ACL)
// it returns why, and the instance is polled instead; err is for a failed
// connection.
func (in *instance) ensureNotifications(ctx context.Context) (polling string, err error) {
	current, err := in.flags(ctx)
	if err != nil {
		if isConnErr(err) {
			return "", fmt.Errorf("redis at %s: CONFIG GET: %w", in.addr, err)
		}
		return in.pollReason("CONFIG GET notify-keyspace-events", err), nil
	}
	missing := missingFlags(current)
	if missing == "" {
		return "", nil
	}
	next := withFlags(current, missing)
	cctx, cancel := context.WithTimeout(ctx, in.c.cfg.DialTimeout)
	defer cancel()
	if err := in.client.ConfigSet(cctx, "notify-keyspace-events", next).Err(); err != nil {
		if isConnErr(err) {
			return "", fmt.Errorf("redis at %s: CONFIG SET: %w", in.addr, err)
		}
		return in.pollReason("CONFIG SET notify-keyspace-events", err), nil
	}
	in.log.Info("enabled keyspace notifications", "notify_keyspace_events", next, "was", current, "added", missing)
	return "", nil
}

func (in *instance) pollReason(what string, err error) string {
	reason := fmt.Sprintf("redis at %s: keyspace notifications unavailable (%s: %v): polling every %s", in.addr, what, err, in.c.cfg.PollInterval)
	in.log.Warn("keyspace notifications unavailable; polling instead", "err", err, "poll_interval", in.c.cfg.PollInterval)
	return reason
}

// isConnErr tells a failed exchange from an error reply: a command the
// server refused (unknown, renamed, or denied by ACL).
func isConnErr(err error) bool {
	var rerr goredis.Error
	return !errors.As(err, &rerr)
}

// scan reads every key that matches a pattern, except counter keys.
func (in *instance) scan(ctx context.Context) ([]reading, error) {
	seen := make(map[string]bool)
	var keys []string
	for _, p := range in.c.cfg.Patterns {
		var cursor uint64
		for {
			cctx, cancel := context.WithTimeout(ctx, in.c.cfg.DialTimeout)
			page, next, err := in.client.Scan(cctx, cursor, p, scanCount).Result()
			cancel()
			if err != nil {
				return nil, fmt.Errorf("redis at %s: SCAN %q: %w", in.addr, p, err)
			}
			for _, k := range page {
				if !seen[k] && !in.c.rule.isCounterKey(k) {
					seen[k] = true
					keys = append(keys, k)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	rds, err := in.read(ctx, keys)
	if err != nil {
		return nil, err
	}
	present := rds[:0]
	for _, rd := range rds {
		if rd.Type != "none" {
			present = append(present, rd)
		}
	}
	return present, nil
}

// read reads keys, each atomically with its counter key: a MULTI per chunk
// of keys, so the server runs each chunk's reads as one.
func (in *instance) read(ctx context.Context, keys []string) ([]reading, error) {
	out := make([]reading, 0, len(keys))
	for start := 0; start < len(keys); start += readChunk {
		chunk := keys[start:min(start+readChunk, len(keys))]
		rds, err := in.readChunk(ctx, chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, rds...)
	}
	return out, nil
}

// readScript reads keys the way readChunk's MULTI does, in one command: a
// script runs atomically, and one command for a chunk of keys costs the
// server far less than four for each. KEYS are the lock keys, each followed
// by its counter key when ARGV[1] (the stride) is 2. Per key it returns its
// type, string value or hash fields (flattened), PTTL, counter value, and
// deadline (PEXPIRETIME, where the server has it: Redis 7 and later).
var readScript = goredis.NewScript(`local stride = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS, stride do
	local k = KEYS[i]
	local t = redis.call('TYPE', k).ok
	local v = false
	if t == 'string' then
		v = redis.call('GET', k)
	elseif t == 'hash' then
		v = redis.call('HGETALL', k)
	end
	local c = false
	if stride == 2 then
		c = redis.pcall('GET', KEYS[i + 1])
		if type(c) ~= 'string' then
			c = false
		end
	end
	local d = redis.pcall('PEXPIRETIME', k)
	if type(d) ~= 'number' then
		d = false
	end
	out[#out + 1] = {t, v, redis.call('PTTL', k), c, d}
end
return out`)

func (in *instance) readChunk(ctx context.Context, keys []string) ([]reading, error) {
	cctx, cancel := context.WithTimeout(ctx, in.c.cfg.DialTimeout)
	defer cancel()
	if in.noScript == "" {
		rds, err := in.readByScript(cctx, keys)
		if !isScriptDenied(err) {
			return rds, err
		}
		in.noScript = err.Error()
		in.log.Info("reading keys with MULTI: scripts are not allowed", "err", err)
	}
	return in.readByMulti(cctx, keys)
}

// isScriptDenied reports a server that will not run readScript for this
// user: an ACL without EVAL, or scripting renamed away.
func isScriptDenied(err error) bool {
	if err == nil {
		return false
	}
	var rerr goredis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "unknown command")
}

func (in *instance) readByScript(ctx context.Context, keys []string) ([]reading, error) {
	stride, args := 1, keys
	if in.c.rule.counter {
		stride, args = 2, make([]string, 0, 2*len(keys))
		for _, k := range keys {
			args = append(args, k, in.c.rule.counterKey(k))
		}
	}
	sent := in.now()
	res, err := readScript.Run(ctx, in.client, args, stride).Slice()
	at := in.now()
	if err != nil {
		return nil, fmt.Errorf("redis at %s: read %d key(s): %w", in.addr, len(keys), err)
	}
	if len(res) != len(keys) {
		return nil, fmt.Errorf("redis at %s: read %d key(s): %d answers", in.addr, len(keys), len(res))
	}
	out := make([]reading, len(keys))
	for i, k := range keys {
		rd, err := decodeScriptReading(k, res[i])
		if err != nil {
			return nil, fmt.Errorf("redis at %s: read %q: %w", in.addr, k, err)
		}
		rd.Sent, rd.At = sent, at
		out[i] = rd
	}
	return out, nil
}

// decodeScriptReading decodes one key's answer from readScript.
func decodeScriptReading(key string, answer any) (reading, error) {
	rd := reading{Key: key, PTTL: -2}
	row, ok := answer.([]any)
	if !ok || len(row) != 5 {
		return rd, fmt.Errorf("unexpected answer %v", answer)
	}
	rd.Type, _ = row[0].(string)
	switch v := row[1].(type) {
	case string:
		rd.Value = v
	case []any:
		rd.Fields = hashFields(v)
	}
	pttl, ok := row[2].(int64)
	if !ok {
		return rd, fmt.Errorf("PTTL: unexpected %v", row[2])
	}
	rd.PTTL = pttl
	if s, ok := row[3].(string); ok {
		rd.Counter = counterValue(s)
	}
	if d, ok := row[4].(int64); ok && d > 0 {
		rd.Deadline = d
	}
	return rd, nil
}

type keyCmds struct {
	typ, get, hgetall, pttl, counter *goredis.Cmd
}

func (in *instance) readByMulti(cctx context.Context, keys []string) ([]reading, error) {
	cmds := make([]keyCmds, len(keys))
	sent := in.now()
	_, err := in.client.TxPipelined(cctx, func(p goredis.Pipeliner) error {
		for i, k := range keys {
			// GET fails on a hash and HGETALL on a string (WRONGTYPE); the
			// one that fits answers, in the same transaction.
			cmds[i].typ = p.Do(cctx, "type", k)
			cmds[i].get = p.Do(cctx, "get", k)
			cmds[i].hgetall = p.Do(cctx, "hgetall", k)
			cmds[i].pttl = p.Do(cctx, "pttl", k)
			if ck := in.c.rule.counterKey(k); ck != "" {
				cmds[i].counter = p.Do(cctx, "get", ck)
			}
		}
		return nil
	})
	at := in.now()
	if err != nil && !isReplyErr(err) {
		return nil, fmt.Errorf("redis at %s: read %d key(s): %w", in.addr, len(keys), err)
	}
	out := make([]reading, len(keys))
	for i, k := range keys {
		rd, err := decodeReading(k, cmds[i])
		if err != nil {
			return nil, fmt.Errorf("redis at %s: read %q: %w", in.addr, k, err)
		}
		rd.Sent, rd.At = sent, at
		out[i] = rd
	}
	return out, nil
}

// isReplyErr reports an error reply for a command in the transaction (the
// expected WRONGTYPE, or a missing key), as opposed to a failed exchange.
func isReplyErr(err error) bool {
	if errors.Is(err, goredis.Nil) {
		return true
	}
	var rerr goredis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

func decodeReading(key string, c keyCmds) (reading, error) {
	rd := reading{Key: key, PTTL: -2}
	typ, err := c.typ.Text()
	if err != nil {
		return rd, fmt.Errorf("TYPE: %w", err)
	}
	rd.Type = typ
	switch typ {
	case "string":
		v, err := c.get.Text()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return rd, fmt.Errorf("GET: %w", err)
		}
		rd.Value = v
	case "hash":
		vals, err := c.hgetall.Slice()
		if err != nil {
			return rd, fmt.Errorf("HGETALL: %w", err)
		}
		rd.Fields = hashFields(vals)
	}
	pttl, err := c.pttl.Int64()
	if err != nil {
		return rd, fmt.Errorf("PTTL: %w", err)
	}
	rd.PTTL = pttl
	if c.counter != nil {
		if s, err := c.counter.Text(); err == nil {
			rd.Counter = counterValue(s)
		}
	}
	return rd, nil
}

// hashFields turns HGETALL's flat field, value list into a map.
func hashFields(flat []any) map[string]string {
	fields := make(map[string]string, len(flat)/2)
	for j := 0; j+1 < len(flat); j += 2 {
		fields[fmt.Sprint(flat[j])] = fmt.Sprint(flat[j+1])
	}
	return fields
}

// counterValue reads a token counter key's value: nil unless an integer.
func counterValue(s string) *int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}
