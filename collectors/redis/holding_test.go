package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func int64p(v int64) *int64 { return &v }

func TestNewValidates(t *testing.T) {
	ok := Config{Name: "cache", Addrs: []string{"127.0.0.1:6379"}, Patterns: []string{"lock:*"}}
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"NoName", func(c *Config) { c.Name = " " }, "name: required"},
		{"NoAddrs", func(c *Config) { c.Addrs = nil }, "addrs: at least one required"},
		{"EmptyAddr", func(c *Config) { c.Addrs = []string{"a:1", ""} }, "addrs[1]: empty"},
		{"DuplicateAddr", func(c *Config) { c.Addrs = []string{"a:1", "b:1", "a:1"} }, "addrs[2]: a:1 is listed twice"},
		{"QuorumTooSmall", func(c *Config) { c.Addrs, c.Quorum = []string{"a:1", "b:1", "c:1"}, 1 }, "quorum: must be more than half of the 3 addrs and at most 3"},
		{"QuorumTooLarge", func(c *Config) { c.Quorum = 2 }, "quorum: must be more than half of the 1 addrs and at most 1"},
		{"NegativeDB", func(c *Config) { c.DB = -1 }, "db: must not be negative"},
		{"NoPatterns", func(c *Config) { c.Patterns = nil }, "patterns: at least one required"},
		{"EmptyPattern", func(c *Config) { c.Patterns = []string{"lock:*", ""} }, "patterns[1]: empty"},
		{"BothTokenRules", func(c *Config) { c.Token = TokenRule{CounterKey: "{key}:fence", ValuePattern: "x"} }, "token: counter_key and value_pattern exclude each other"},
		{"CounterWithoutKey", func(c *Config) { c.Token.CounterKey = "fence" }, "token.counter_key: must contain {key}"},
		{"CounterIsLock", func(c *Config) { c.Token.CounterKey = "{key}" }, "token.counter_key: must add something to {key}"},
		{"BadPattern", func(c *Config) { c.Token.ValuePattern = "(" }, "token.value_pattern: error parsing regexp"},
		{"PatternWithoutGroups", func(c *Config) { c.Token.ValuePattern = `^(\d+):(.*)$` }, "token.value_pattern: needs the named groups"},
		{"PatternWithoutHolder", func(c *Config) { c.Token.ValuePattern = `^(?P<token>\d+):` }, "token.value_pattern: needs the named groups"},
		{"NegativeReconcile", func(c *Config) { c.ReconcileInterval = -time.Second }, "reconcile_interval: must not be negative"},
		{"NegativePoll", func(c *Config) { c.PollInterval = -time.Second }, "poll_interval: must not be negative"},
		{"NegativeDial", func(c *Config) { c.DialTimeout = -time.Second }, "dial_timeout: must not be negative"},
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
	if c.Name() != "cache" || c.Kind() != audit.KindRedis || c.Degraded() != "" {
		t.Fatalf("Name, Kind, Degraded = %q, %q, %q", c.Name(), c.Kind(), c.Degraded())
	}
	if c.cfg.Quorum != 1 || c.cfg.ReconcileInterval != DefaultReconcileInterval || c.cfg.PollInterval != DefaultPollInterval || c.cfg.DialTimeout != DefaultDialTimeout {
		t.Fatalf("defaults not applied: %+v", c.cfg)
	}
	three := ok
	three.Addrs = []string{"a:1", "b:1", "c:1"}
	c, err = New(three, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Quorum != 2 {
		t.Fatalf("quorum of 3 addrs = %d, want 2", c.cfg.Quorum)
	}
}

func TestDecode(t *testing.T) {
	counter := mustRule(t, TokenRule{CounterKey: "{key}:fence"})
	pattern := mustRule(t, TokenRule{ValuePattern: `^(?P<token>\d+):(?P<holder>.+)$`})
	none := mustRule(t, TokenRule{})
	str := func(v string, pttl int64) reading {
		return reading{Key: "lock:a", Type: "string", Value: v, PTTL: pttl, Sent: at(0), At: at(3)}
	}
	tests := []struct {
		name  string
		rule  rule
		rd    reading
		ok    bool
		want  holding
		token *int64
	}{
		{"RedsyncValue", none, str("q1w2e3==", 7999), true,
			holding{ID: "q1w2e3==", Holder: "q1w2e3==", TTL: 8 * time.Second, Lo: at(7999), Hi: at(8003), At: at(3)}, nil},
		{"NoExpiry", none, str("v", -1), true, holding{ID: "v", Holder: "v", At: at(3)}, nil},
		{"CounterToken", counter, func() reading { r := str("abc", 4999); r.Counter = int64p(7); return r }(), true,
			holding{ID: "abc", Holder: "abc", TTL: 5 * time.Second, Lo: at(4999), Hi: at(5003), At: at(3)}, int64p(7)},
		{"CounterMissing", counter, str("abc", 4999), true,
			holding{ID: "abc", Holder: "abc", TTL: 5 * time.Second, Lo: at(4999), Hi: at(5003), At: at(3)}, nil},
		{"PatternMatch", pattern, str("42:worker-1", 999), true,
			holding{ID: "42:worker-1", Holder: "worker-1", TTL: time.Second, Lo: at(999), Hi: at(1003), At: at(3)}, int64p(42)},
		{"PatternNoMatch", pattern, str("worker-1", 999), true,
			holding{ID: "worker-1", Holder: "worker-1", TTL: time.Second, Lo: at(999), Hi: at(1003), At: at(3), Unmatched: true}, nil},
		{"RedissonHash", none, reading{Type: "hash", Fields: map[string]string{"8f1c:1": "2"}, PTTL: 29999, Sent: at(0), At: at(3)}, true,
			holding{ID: "8f1c:1", Holder: "8f1c:1", Count: 2, TTL: 30 * time.Second, Lo: at(29999), Hi: at(30003), At: at(3)}, nil},
		{"HashPatternOnField", pattern, reading{Type: "hash", Fields: map[string]string{"9:node-a": "1"}, PTTL: 29999, Sent: at(0), At: at(3)}, true,
			holding{ID: "9:node-a", Holder: "node-a", Count: 1, TTL: 30 * time.Second, Lo: at(29999), Hi: at(30003), At: at(3)}, int64p(9)},
		{"HashNonCountFieldsIgnored", none, reading{Type: "hash", Fields: map[string]string{"mode": "write", "b:1": "1", "a:1": "1"}, PTTL: -1, At: at(3)}, true,
			holding{ID: "a:1,b:1", Holder: "a:1,b:1", Count: 2, At: at(3)}, nil},
		{"HashWithoutHolders", none, reading{Type: "hash", Fields: map[string]string{"mode": "write"}}, false, holding{}, nil},
		{"Gone", none, reading{Type: "none", PTTL: -2}, false, holding{}, nil},
		{"OtherType", none, reading{Type: "list", PTTL: -1}, false, holding{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := tt.rule.decode(tt.rd)
			if ok != tt.ok {
				t.Fatalf("decode ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if !tokenEq(h.Token, tt.token) {
				t.Fatalf("token = %v, want %v", tokenStr(h.Token), tokenStr(tt.token))
			}
			h.Token = nil
			if h.ID != tt.want.ID || h.Holder != tt.want.Holder || h.Count != tt.want.Count || h.TTL != tt.want.TTL ||
				!h.Lo.Equal(tt.want.Lo) || !h.Hi.Equal(tt.want.Hi) || h.Unmatched != tt.want.Unmatched {
				t.Fatalf("decode = %+v, want %+v", h, tt.want)
			}
		})
	}
}

func TestCounterKeys(t *testing.T) {
	r := mustRule(t, TokenRule{CounterKey: "{key}:fence"})
	if got := r.counterKey("lock:a"); got != "lock:a:fence" {
		t.Fatalf("counterKey = %q", got)
	}
	for key, want := range map[string]bool{"lock:a:fence": true, "lock:a": false, ":fence": false, "lock:fencer": false} {
		if got := r.isCounterKey(key); got != want {
			t.Errorf("isCounterKey(%q) = %v, want %v", key, got, want)
		}
	}
	tagged := mustRule(t, TokenRule{CounterKey: "fence:{key}"})
	if got := tagged.counterKey("lock:{orders}"); got != "fence:lock:{orders}" {
		t.Fatalf("counterKey = %q", got)
	}
	if !tagged.isCounterKey("fence:lock:{orders}") || tagged.isCounterKey("lock:{orders}") {
		t.Fatal("isCounterKey with a prefix rule is wrong")
	}
	if none := mustRule(t, TokenRule{}); none.isCounterKey("lock:a:fence") || none.counterKey("x") != "" || none.sequential() {
		t.Fatal("a source without a counter rule has counter keys")
	}
	if !r.sequential() || mustRule(t, TokenRule{ValuePattern: `(?P<token>\d+)(?P<holder>.*)`}).sequential() {
		t.Fatal("only counter tokens are sequential")
	}
}

func TestDeadlineMoved(t *testing.T) {
	h := func(lo, hi int) holding { return holding{TTL: time.Second, Lo: at(lo), Hi: at(hi)} }
	sd := func(h holding, ms int) holding { h.Deadline = at(ms).UnixMilli(); return h }
	tests := []struct {
		name           string
		a, b           holding
		later, earlier bool
	}{
		{"SameDeadlineReadTwice", h(1000, 1004), h(1001, 1003), false, false},
		{"Overlapping", h(1000, 1004), h(1003, 1009), false, false},
		{"WithinTolerance", h(1000, 1004), h(1005, 1009), false, false},
		{"Extended", h(1000, 1004), h(1300, 1302), true, false},
		{"Shortened", h(1000, 1004), h(500, 502), false, true},
		{"ExpiryAdded", holding{}, h(1000, 1004), true, false},
		{"ExpiryRemoved", h(1000, 1004), holding{}, false, false},
		{"NeitherExpires", holding{}, holding{}, false, false},
		// With the server's deadlines, a slow read's wide window hides
		// nothing, and the same deadline read twice is still the same.
		{"ServerDeadlineExtendedUnderSlowReads", sd(h(1000, 1700), 1500), sd(h(1400, 2100), 1600), true, false},
		{"ServerDeadlineReadTwice", sd(h(1000, 1700), 1500), sd(h(1200, 1900), 1500), false, false},
		{"ServerDeadlineShortened", sd(h(1000, 1700), 1500), sd(h(1000, 1700), 1400), false, true},
		{"OneSideWithoutServerDeadline", sd(h(1000, 1700), 1500), h(1400, 2100), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			later, earlier := deadlineMoved(tt.a, tt.b)
			if later != tt.later || earlier != tt.earlier {
				t.Fatalf("deadlineMoved = later %v, earlier %v; want %v, %v", later, earlier, tt.later, tt.earlier)
			}
		})
	}
	n := narrow(h(1000, 1004), h(1002, 1006))
	if !n.Lo.Equal(at(1002)) || !n.Hi.Equal(at(1004)) {
		t.Fatalf("narrow = [%s, %s], want [1002ms, 1004ms]", n.Lo.Sub(t0), n.Hi.Sub(t0))
	}
}

func TestMissingFlags(t *testing.T) {
	tests := []struct{ current, missing string }{
		{"", "Kg$hxe"},
		{"Ex", "Kg$he"},
		{"AK", ""},
		{"KA", ""},
		{"AE", "K"},
		{"Kg$lshzxetd", ""},
		{"Kg$xe", "h"},
		{"Klm", "g$hxe"},
	}
	for _, tt := range tests {
		if got := missingFlags(tt.current); got != tt.missing {
			t.Errorf("missingFlags(%q) = %q, want %q", tt.current, got, tt.missing)
		}
		if got := missingFlags(withFlags(tt.current, tt.missing)); got != "" {
			t.Errorf("after adding %q to %q, still missing %q", tt.missing, tt.current, got)
		}
		if !strings.HasPrefix(withFlags(tt.current, tt.missing), tt.current) {
			t.Errorf("withFlags dropped some of %q", tt.current)
		}
	}
}

func mustRule(t *testing.T, tr TokenRule) rule {
	t.Helper()
	r, err := newRule(tr)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tokenEq(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func tokenStr(p *int64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatInt(*p, 10)
}
