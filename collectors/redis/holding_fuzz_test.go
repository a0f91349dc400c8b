package redis

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// FuzzTokenRule compiles arbitrary token rules (token.counter_key,
// token.value_pattern) and decodes arbitrary readings of a lock key with
// them: the value of a string lock, two fields of a hash lock, the PTTL, the
// counter key's value. Whatever the input, nothing panics, and
//
//   - a rule is refused with an EINVALID error naming token.counter_key or
//     token.value_pattern, or compiled with both named groups;
//   - every lock key's counter key counts as a counter key, so it is never
//     watched as a lock;
//   - a string key, or a hash key with an integer field, is a hold; nothing
//     else is;
//   - a hold's holder is the value (or the hash's holder fields) or the part
//     the pattern's holder group picked; its token is the pattern's token
//     group read as an integer, or the counter's value, and nothing else;
//   - a key with an expiry lives a positive time after the read, and its
//     deadline window is not inverted.
//
// Seeds: the rules and values of docs/backends/redis.md and holding_test.go,
// plus what testdata/fuzz/FuzzTokenRule holds. Run longer with
// go test -run '^$' -fuzz FuzzTokenRule -fuzztime 10m ./collectors/redis
func FuzzTokenRule(f *testing.F) {
	const pattern = `^(?P<token>\d+):(?P<holder>.+)$`
	f.Add("", "{key}:fence", "lock:a", byte(0), "worker-1", "", "", int64(30000), "41")
	f.Add(pattern, "", "lock:a", byte(0), "42:worker-2", "", "", int64(10000), "")
	f.Add(pattern, "", "lock:a", byte(0), "worker-2", "", "", int64(-1), "")
	f.Add(pattern, "", "lock:a", byte(0), "99999999999999999999:w", "", "", int64(-2), "")
	f.Add(`(?P<holder>[^:]+):(?P<token>-?\d+)`, "", "lock:b", byte(0), "w:-7", "", "", int64(0), "")
	f.Add("", "{key}:fence", "lock:r", byte(1), "", "8743c9c0-0795-4907-87fd-6c719a6b4586:1", "1", int64(29000), "3")
	f.Add("", "", "lock:rw", byte(1), "", "mode", "write", int64(5000), "")
	f.Add("", "", "lock:z", byte(2), "", "", "", int64(-2), "")
	f.Add("", "fence:{key}", "lock:a", byte(0), "\xff\x00<script>", "", "", int64(9_000_000_000_000_000), "x")
	f.Add("(", "", "k", byte(0), "", "", "", int64(0), "")
	f.Add(`(?P<token>\d+)`, "", "k", byte(0), "", "", "", int64(0), "")
	f.Add("", "{key}", "k", byte(0), "", "", "", int64(0), "")
	f.Add("", "fence", "k", byte(0), "", "", "", int64(0), "")
	f.Fuzz(func(t *testing.T, valuePattern, counterKey, key string, typ byte, value, field, fieldValue string, pttl int64, counter string) {
		r, err := newRule(TokenRule{CounterKey: counterKey, ValuePattern: valuePattern})
		if err != nil {
			var e *audit.Error
			if !errors.As(err, &e) || e.Code != audit.EINVALID ||
				(!strings.HasPrefix(e.Message, "token.counter_key: ") && !strings.HasPrefix(e.Message, "token.value_pattern: ")) {
				t.Fatalf("newRule error %v: want EINVALID naming token.counter_key or token.value_pattern", err)
			}
			return
		}
		if r.re != nil && (r.tokenGroup < 0 || r.holderGroup < 0) {
			t.Fatalf("rule %q compiled without its named groups", valuePattern)
		}
		if key != "" && r.counter && !r.isCounterKey(r.counterKey(key)) {
			t.Fatalf("counter key %q of %q is not recognised as a counter key", r.counterKey(key), key)
		}

		sent := t0
		rd := reading{Key: key, PTTL: pttl, Sent: sent, At: sent.Add(3 * time.Millisecond), Counter: counterValue(counter)}
		switch typ % 3 {
		case 0:
			rd.Type, rd.Value = "string", value
		case 1:
			rd.Type = "hash"
			rd.Fields = map[string]string{field: fieldValue, value: counter}
		default:
			rd.Type = "list"
		}
		h, ok := r.decode(rd)
		intField := false
		for _, v := range rd.Fields {
			if _, err := strconv.ParseInt(v, 10, 64); err == nil {
				intField = true
			}
		}
		if want := rd.Type == "string" || intField; ok != want {
			t.Fatalf("decode(%+v) ok = %v, want %v", rd, ok, want)
		}
		if !ok {
			return
		}

		var m []string
		if r.re != nil {
			m = r.re.FindStringSubmatch(h.ID)
		}
		switch {
		case r.re == nil || m == nil:
			if h.Holder != h.ID {
				t.Fatalf("holder %q, want the whole value %q", h.Holder, h.ID)
			}
		case h.Holder != m[r.holderGroup]:
			t.Fatalf("holder %q, want the holder group %q of %q", h.Holder, m[r.holderGroup], h.ID)
		}
		if h.Token != nil {
			fromPattern := m != nil && mustParseOK(m[r.tokenGroup]) && mustParse(m[r.tokenGroup]) == *h.Token
			fromCounter := r.re == nil && r.counter && rd.Counter != nil && *rd.Counter == *h.Token
			if !fromPattern && !fromCounter {
				t.Fatalf("token %d comes from neither the value %q nor the counter %q", *h.Token, h.ID, counter)
			}
		} else if m != nil && mustParseOK(m[r.tokenGroup]) {
			t.Fatalf("value %q matched with token %q, but the hold has no token", h.ID, m[r.tokenGroup])
		}
		if h.Unmatched != (r.re != nil && h.Token == nil) {
			t.Fatalf("unmatched = %v with rule %q, value %q, token %v", h.Unmatched, valuePattern, h.ID, h.Token)
		}

		if pttl >= 0 {
			if h.TTL <= 0 || !h.expires() || h.Hi.Before(h.Lo) || !h.Hi.After(rd.At) {
				t.Fatalf("PTTL %d ms: ttl %v, deadline window [%v, %v] read at %v: want a positive TTL and a window after the read",
					pttl, h.TTL, h.Lo, h.Hi, rd.At)
			}
		} else if h.expires() || h.TTL != 0 {
			t.Fatalf("PTTL %d ms (no expiry): ttl %v, window to %v", pttl, h.TTL, h.Hi)
		}
	})
}

func mustParse(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func mustParseOK(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}
