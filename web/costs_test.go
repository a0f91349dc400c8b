package web

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAPICosts: the fixture's last hour (from t0) of writes, by lock and by
// holder and by namespace (the first path segment of the hostile name):
// orders' observed tenure renewed 3 times and its granted one 100, the
// hostile lock granted and released. Bad parameters answer 400 naming the parameter and its values.
func TestAPICosts(t *testing.T) {
	f := newFixture(t)
	rows := func(m map[string]any) string {
		var b strings.Builder
		for _, r := range list(t, m, "rows") {
			fmt.Fprintf(&b, "%v|%v %v/%v/%v=%v lock %v; ", r["source"], r["key"], r["grants"], r["renewals"], r["releases"], r["writes"], r["lock_id"])
		}
		return b.String()
	}
	orders, hostile := itoa(f.orders.ID), itoa(f.hostile.ID)
	for _, tc := range []struct{ target, want string }{
		{"/api/v1/costs", "prod-etcd|/locks/orders 1/103/0=104 lock " + orders + "; prod-etcd|" + xss + " 1/0/1=2 lock " + hostile + "; "},
		{"/api/v1/costs?window=24h&by=holder&limit=2", "|worker-2 1/100/0=101 lock <nil>; |worker-1 0/3/0=3 lock <nil>; "},
		{"/api/v1/costs?by=namespace", "prod-etcd|locks 1/103/0=104 lock <nil>; prod-etcd|<script>alert(1)< 1/0/1=2 lock <nil>; "},
	} {
		m := f.getJSON(t, tc.target, 200)
		if got := rows(m); got != tc.want {
			t.Errorf("GET %s rows:\n got %s\nwant %s", tc.target, got, tc.want)
		}
	}
	m := f.getJSON(t, "/api/v1/costs?by=source", 200)
	total := m["total"].(map[string]any)
	if m["window"] != "1h" || m["by"] != "source" || m["groups"] != 1.0 || total["writes"] != 106.0 ||
		total["per_second"] != 106.0/3600 || m["to"] != now.Format("2006-01-02T15:04:05.000000000Z") {
		t.Errorf("GET /api/v1/costs?by=source = %v, want prod-etcd's 106 writes of the hour to %v", m, now)
	}

	for _, tc := range []struct{ target, want string }{
		{"/api/v1/costs?window=2h", "window: must be one of 1h, 24h"},
		{"/api/v1/costs?window=1H", "window: must be one of 1h, 24h"},
		{"/api/v1/costs?by=resource", "by: must be one of lock, namespace, holder, source"},
		{"/api/v1/costs?limit=0", "limit: must be a positive integer"},
		{"/api/v1/costs?limit=ten", "limit: must be a positive integer"},
	} {
		wantError(t, f.getJSON(t, tc.target, 400), tc.want)
	}
}

// TestOverviewShowsTopWriters: the overview's first reading starts the
// count and says so; once counted, the hour's top writers are listed,
// linked to their locks.
func TestOverviewShowsTopWriters(t *testing.T) {
	f := newFixture(t)
	page := func() string {
		res, b := f.do(t, "GET", "/", nil)
		if res.StatusCode != 200 {
			t.Fatalf("GET /: %d %s", res.StatusCode, b)
		}
		return string(b)
	}
	if p := page(); !strings.Contains(p, "Writes are being counted.") {
		t.Fatalf("first overview has no note that writes are being counted")
	}
	row := `href="/locks/` + itoa(f.orders.ID) + `"><span class="muted">prod-etcd/</span>/locks/orders</a></td><td class="num">104</td>`
	deadline := time.Now().Add(10 * time.Second)
	for p := page(); !strings.Contains(p, row); p = page() {
		if time.Now().After(deadline) {
			t.Fatalf("overview lists no top writer %s within 10s", row)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
