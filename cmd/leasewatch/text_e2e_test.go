package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	goredis "github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/redis/redisserver"
)

// startRedisServe runs redis-server with keyspace notifications and serve
// watching its keys lock:*, and returns a client of the server and serve's
// base URL.
func startRedisServe(t *testing.T) (*goredis.Client, string) {
	t.Helper()
	dir := t.TempDir()
	srv, err := redisserver.Start(context.Background(), filepath.Join(dir, "redis"), "--notify-keyspace-events", "Kg$hxe")
	if errors.Is(err, redisserver.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cli := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	t.Cleanup(func() { cli.Close() })
	base, _ := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
database: %s
sources:
  - name: cache
    kind: redis
    addr: %s
    patterns: ["lock:*"]
`, filepath.Join(dir, "leasewatch.db"), srv.Addr))
	return cli, base
}

// heldAs waits until the API lists lock name of source cache as held by
// holder, and returns its id.
func heldAs(t *testing.T, base, name, holder string) int64 {
	t.Helper()
	var id int64
	eventually(t, 15*time.Second, fmt.Sprintf("%q held by %.60q", name, holder), func() bool {
		var resp struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks?source=cache&name="+url.QueryEscape(name), &resp)
		for _, l := range resp.Locks {
			if l.Name == name && l.State == "held" && l.Holder == holder {
				id = l.ID
				return true
			}
		}
		return false
	})
	return id
}

// handover holds key by first, lets it go and holds it by second, so the
// review has a handover of it to show.
func handover(t *testing.T, cli *goredis.Client, base, key, name, first, second string) int64 {
	t.Helper()
	ctx := context.Background()
	if err := cli.Set(ctx, key, first, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	id := heldAs(t, base, name, audit.Text(first))
	if err := cli.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, name+" released", func() bool {
		var l apiLock
		getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d", id), &l)
		return l.State != "held"
	})
	if err := cli.Set(ctx, key, second, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	heldAs(t, base, name, audit.Text(second))
	return id
}

// A Redis key that is not valid UTF-8, which any client can create under a
// watched pattern, is recorded under its escaped name: /metrics keeps
// answering 200 with its series, the key stays apart from a key whose bytes
// are its escape, and the lock is found by its name in the review and the
// API.
func TestServeRedisKeyNotUTF8(t *testing.T) {
	cli, base := startRedisServe(t)
	ctx := context.Background()
	raw, name := "lock:\xff\xfe-orders", `lock:\xff\xfe-orders`
	lookalike := name // a key whose bytes are the first one's escape
	for key, holder := range map[string]string{raw: "worker-\xc3", lookalike: "other"} {
		if err := cli.Set(ctx, key, holder, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "two locks held in cache", func() bool {
		var resp struct{ Locks []apiLock }
		getJSON(t, base, "/api/v1/locks?source=cache&state=held", &resp)
		return len(resp.Locks) == 2
	})

	metrics := func() string {
		t.Helper()
		code, body := get(t, base, "/metrics")
		if code != 200 {
			t.Fatalf("GET /metrics = %d, want 200:\n%.2000s", code, body)
		}
		if !utf8.ValidString(body) {
			t.Fatalf("GET /metrics is not valid UTF-8")
		}
		return body
	}
	// The text format escapes a label value's backslashes once more.
	body := metrics()
	for _, series := range []string{
		`leasewatch_lease_duration_seconds{lock="lock:\\xff\\xfe-orders",source="cache"} `,
		`leasewatch_lease_duration_seconds{lock="lock:\\\\xff\\\\xfe-orders",source="cache"} `,
	} {
		if !strings.Contains(body, series) {
			t.Fatalf("GET /metrics lacks %s", series)
		}
	}

	id := heldAs(t, base, name, `worker-\xc3`)
	if other := heldAs(t, base, `lock:\\xff\\xfe-orders`, "other"); other == id {
		t.Fatalf("keys %q and %q became one lock %d", raw, lookalike, id)
	}
	// A second holder, for a handover the review shows.
	if err := cli.Del(ctx, raw).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, name+" released", func() bool {
		var l apiLock
		getJSON(t, base, fmt.Sprintf("/api/v1/locks/%d", id), &l)
		return l.State != "held"
	})
	if err := cli.Set(ctx, raw, "worker-b", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	heldAs(t, base, name, "worker-b")

	ref := url.QueryEscape("cache/" + name)
	code, page := get(t, base, "/review?lock="+ref)
	if code != 200 || !strings.Contains(page, fmt.Sprintf(`href="/locks/%d?`, id)) || !strings.Contains(page, `worker-\xc3`) {
		t.Fatalf("GET /review?lock=%s = %d, want 200 with lock %d:\n%.2000s", ref, code, id, page)
	}
	if code, body := get(t, base, "/api/v1/findings?lock="+ref); code != 200 {
		t.Fatalf("GET /api/v1/findings?lock=%s = %d: %s", ref, code, body)
	}
	metrics()
}

// A 100,000-character holder is cut to audit.MaxText, ends in the cut
// mark that says so on every page, and keeps the lock's page small.
func TestServeRedisHolderCut(t *testing.T) {
	cli, base := startRedisServe(t)
	ctx := context.Background()
	long := strings.Repeat("h", 100_000)
	if err := cli.Set(ctx, "lock:long", long, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	holder := audit.Text(long)
	id := heldAs(t, base, "lock:long", holder)
	if n := utf8.RuneCountInString(holder); n > audit.MaxText || !strings.Contains(holder, "(cut from 100000 bytes") {
		t.Fatalf("holder of %d characters, ending %q: want at most %d, marked cut", n, holder[max(0, len(holder)-80):], audit.MaxText)
	}
	code, page := get(t, base, fmt.Sprintf("/locks/%d", id))
	if code != 200 || !strings.Contains(page, "(cut from 100000 bytes") {
		t.Fatalf("GET /locks/%d = %d, want 200 saying the holder was cut", id, code)
	}
	if len(page) > 100_000 {
		t.Fatalf("lock page is %d bytes: the holder was not cut", len(page))
	}
}

// A bidirectional override in a key and a holder is escaped as the key's
// other controls are: the review shows it as text, by which the lock is
// asked for, and nowhere raw.
func TestServeRedisBidiOverrideOnReview(t *testing.T) {
	cli, base := startRedisServe(t)
	name := `lock:txt\xe2\x80\xaegnp.exe`
	id := handover(t, cli, base, "lock:txt\u202egnp.exe", name, "\u2066evil\u2069", "good")
	for _, path := range []string{"/review?lock=" + url.QueryEscape("cache/"+name), "/review?source=cache"} {
		code, page := get(t, base, path)
		if code != 200 || !strings.Contains(page, name) || !strings.Contains(page, `\xe2\x81\xa6evil\xe2\x81\xa9`) ||
			!strings.Contains(page, fmt.Sprintf(`href="/locks/%d?`, id)) {
			t.Fatalf("GET %s = %d, want 200 showing lock %d and its holders as text:\n%.3000s", path, code, id, page)
		}
		if strings.ContainsAny(page, "\u202e\u2066\u2069") {
			t.Fatalf("GET %s shows a raw bidirectional control", path)
		}
	}
}

// An etcd key with bytes that are not UTF-8 is a lock under its escaped
// name, in the API, the metrics and the review, through embedded etcd and
// concurrency.Mutex as a client would take it.
func TestServeEtcdKeyNotUTF8(t *testing.T) {
	srv, cli := startEtcd(t)
	rs := startTestService(t, srv.Endpoint, filepath.Join(t.TempDir(), "lw.db"))
	base := rs.svc.URL()
	ctx := context.Background()
	raw, name := "/locks/\xff\xfe-orders", `/locks/\xff\xfe-orders`

	var id int64
	for _, ttl := range []int{5, 6} { // two holders, one after the other: a handover
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		m := concurrency.NewMutex(s, raw)
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		holder := fmt.Sprintf("%x", s.Lease())
		eventually(t, 15*time.Second, fmt.Sprintf("%q held by %s", name, holder), func() bool {
			var resp struct{ Locks []apiLock }
			getJSON(t, base, "/api/v1/locks?source=e2e&name="+url.QueryEscape(name), &resp)
			if len(resp.Locks) == 1 && resp.Locks[0].Name == name && resp.Locks[0].Holder == holder {
				id = resp.Locks[0].ID
				return true
			}
			return false
		})
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}

	code, body := get(t, base, "/metrics")
	series := `leasewatch_lock_holder_changes_total{lock="/locks/\\xff\\xfe-orders",source="e2e"} 2`
	if code != 200 || !strings.Contains(body, series) {
		t.Fatalf("GET /metrics = %d, want 200 with %s:\n%.3000s", code, series, body)
	}
	ref := url.QueryEscape("e2e/" + name)
	code, page := get(t, base, "/review?lock="+ref)
	if code != 200 || !strings.Contains(page, fmt.Sprintf(`href="/locks/%d?`, id)) {
		t.Fatalf("GET /review?lock=%s = %d, want 200 with lock %d:\n%.2000s", ref, code, id, page)
	}
	if code, body := get(t, base, "/api/v1/findings?lock="+ref); code != 200 {
		t.Fatalf("GET /api/v1/findings?lock=%s = %d: %s", ref, code, body)
	}
}
