package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

var lockFields = []string{"id", "source", "kind", "name", "class", "state", "holder", "token",
	"acquired_at", "renewed_at", "expires_at", "lease_duration_ms", "changed_at"}

func TestAPISources(t *testing.T) {
	f := newFixture(t)
	m := f.getJSON(t, "/api/v1/sources", http.StatusOK)
	sources := list(t, m, "sources")
	if len(sources) != 2 {
		t.Fatalf("got %d sources, want 2: %v", len(sources), sources)
	}
	// Ordered by name: cluster-a, prod-etcd.
	a, p := sources[0], sources[1]
	wantKeys(t, "source", a, "name", "kind", "state", "last_event_at", "blind_since", "error", "degraded",
		"observation_lag_ms", "observation_lag_at")
	if a["name"] != "cluster-a" || a["kind"] != "kubernetes" || a["state"] != "down" || a["error"] != "connection refused" {
		t.Errorf("cluster-a = %v", a)
	}
	wantTime(t, "cluster-a blind_since", a["blind_since"], t0.Add(30*time.Minute))
	wantTime(t, "cluster-a last_event_at", a["last_event_at"], t0)
	wantNull(t, "cluster-a observation_lag_ms", a["observation_lag_ms"])
	wantNull(t, "cluster-a observation_lag_at", a["observation_lag_at"])
	if p["name"] != "prod-etcd" || p["state"] != "up" {
		t.Errorf("prod-etcd = %v", p)
	}
	wantNull(t, "prod-etcd blind_since", p["blind_since"])
	wantTime(t, "prod-etcd last_event_at", p["last_event_at"], t0.Add(20*time.Minute))
	if lag, ok := p["observation_lag_ms"].(float64); !ok || lag != 1500 {
		t.Errorf("prod-etcd observation_lag_ms = %v, want 1500", p["observation_lag_ms"])
	}
	wantTime(t, "prod-etcd observation_lag_at", p["observation_lag_at"], now.Add(-2*time.Second))
}

func TestAPISourcesWithoutRunner(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Sources = nil })
	sources := list(t, f.getJSON(t, "/api/v1/sources", http.StatusOK), "sources")
	if len(sources) != len(knownSources) {
		t.Fatalf("got %d sources, want the %d configured", len(sources), len(knownSources))
	}
	for _, s := range sources {
		if s["state"] != "down" {
			t.Errorf("source %v without a collector: state %v, want down", s["name"], s["state"])
		}
	}
}

func TestAPILocks(t *testing.T) {
	f := newFixture(t)

	t.Run("EveryClass", func(t *testing.T) {
		locks := list(t, f.getJSON(t, "/api/v1/locks", http.StatusOK), "locks")
		if len(locks) != 3 {
			t.Fatalf("got %d locks, want 3 (heartbeats included): %v", len(locks), locks)
		}
		for _, l := range locks {
			wantKeys(t, "lock", l, lockFields...)
		}
	})

	t.Run("ByLastChange", func(t *testing.T) {
		// The heartbeat changed at t0, orders at t0+10m, the hostile lock
		// at t0+20m: from and to select in the store, paged like any filter.
		at := func(d time.Duration) string { return url.QueryEscape(t0.Add(d).Format(time.RFC3339Nano)) }
		names := func(target string) []string {
			var out []string
			for _, l := range list(t, f.getJSON(t, target, http.StatusOK), "locks") {
				out = append(out, l["name"].(string))
			}
			return out
		}
		if got := names("/api/v1/locks?from=" + at(5*time.Minute)); !slices.Equal(got, []string{"/locks/orders", xss}) {
			t.Errorf("from t0+5m: %q, want orders and the hostile lock", got)
		}
		if got := names("/api/v1/locks?from=" + at(5*time.Minute) + "&to=" + at(15*time.Minute)); !slices.Equal(got, []string{"/locks/orders"}) {
			t.Errorf("t0+5m to t0+15m: %q, want orders", got)
		}
		first := names("/api/v1/locks?from=" + at(5*time.Minute) + "&limit=1")
		next := names("/api/v1/locks?from=" + at(5*time.Minute) + "&limit=1&after=" + itoa(f.orders.ID))
		if !slices.Equal(first, []string{"/locks/orders"}) || !slices.Equal(next, []string{xss}) {
			t.Errorf("pages of one: %q then %q, want orders then the hostile lock", first, next)
		}
	})

	t.Run("Shape", func(t *testing.T) {
		locks := list(t, f.getJSON(t, "/api/v1/locks?name="+url.QueryEscape("/locks/orders"), http.StatusOK), "locks")
		if len(locks) != 1 {
			t.Fatalf("name=/locks/orders: got %d locks, want 1", len(locks))
		}
		l := locks[0]
		wantNumber(t, "id", l["id"], float64(f.orders.ID))
		for k, want := range map[string]string{"source": "prod-etcd", "kind": "etcd", "name": "/locks/orders",
			"class": "lock", "state": "held", "holder": "worker-2"} {
			if l[k] != want {
				t.Errorf("%s = %#v, want %q", k, l[k], want)
			}
		}
		wantNumber(t, "token", l["token"], 42)
		wantNumber(t, "lease_duration_ms", l["lease_duration_ms"], 10000)
		wantTime(t, "acquired_at", l["acquired_at"], t0.Add(10*time.Minute))
		wantTime(t, "renewed_at", l["renewed_at"], now.Add(-9*time.Second))
		wantTime(t, "expires_at", l["expires_at"], now.Add(time.Second))
	})

	t.Run("NullsForUnknown", func(t *testing.T) {
		l := f.getJSON(t, "/api/v1/locks/"+itoa(f.hostile.ID), http.StatusOK)
		wantKeys(t, "lock", l, lockFields...)
		wantNull(t, "token", l["token"])
		wantNull(t, "acquired_at", l["acquired_at"])
		wantNull(t, "expires_at", l["expires_at"])
		wantNull(t, "lease_duration_ms", l["lease_duration_ms"])
		if l["name"] != xss || l["holder"] != xss {
			t.Errorf("name, holder = %v, %v; want them exactly as stored", l["name"], l["holder"])
		}
	})

	filters := []struct {
		query string
		want  []string
	}{
		{"class=heartbeat", []string{"kube-node-lease/node-1"}},
		{"class=lock", []string{"/locks/orders", xss}},
		{"state=free", []string{xss}},
		{"source=cluster-a", []string{"kube-node-lease/node-1"}},
		{"q=ORDERS", []string{"/locks/orders"}},
		{"q=worker-2", []string{"/locks/orders"}},
		{"limit=1&class=lock", []string{"/locks/orders"}},
		{"from=" + url.QueryEscape(t0.Add(15*time.Minute).Format(time.RFC3339Nano)), []string{xss}},
		{"to=" + url.QueryEscape(t0.Add(5*time.Minute).Format(time.RFC3339)), []string{"kube-node-lease/node-1"}},
	}
	for _, tc := range filters {
		t.Run("Filter/"+tc.query, func(t *testing.T) {
			locks := list(t, f.getJSON(t, "/api/v1/locks?"+tc.query, http.StatusOK), "locks")
			var got []string
			for _, l := range locks {
				got = append(got, l["name"].(string))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("names = %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("names = %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func TestAPIEvents(t *testing.T) {
	f := newFixture(t)
	base := "/api/v1/locks/" + itoa(f.orders.ID) + "/events"
	events := list(t, f.getJSON(t, base, http.StatusOK), "events")
	if len(events) != 4 {
		t.Fatalf("got %d events, want 4", len(events))
	}
	wantKinds := []string{"observed", "expire", "grant", "write_rejected"}
	for i, e := range events {
		wantKeys(t, "event", e, "id", "kind", "at", "holder", "token", "ttl_ms", "position", "inferred",
			"resource", "detail", "request_id")
		if e["kind"] != wantKinds[i] {
			t.Errorf("events[%d].kind = %v, want %s (time order)", i, e["kind"], wantKinds[i])
		}
		if _, ok := e["inferred"].(bool); !ok {
			t.Errorf("events[%d].inferred = %#v, want a bool", i, e["inferred"])
		}
	}
	obs, exp, rej := events[0], events[1], events[3]
	wantTime(t, "observed at", obs["at"], t0)
	wantNumber(t, "observed token", obs["token"], 41)
	wantNumber(t, "observed ttl_ms", obs["ttl_ms"], 10000)
	if obs["position"] != "100" || obs["inferred"] != false {
		t.Errorf("observed = %v", obs)
	}
	if d, ok := obs["detail"].(map[string]any); !ok || d["lease"] != "694d7f1a2b3c4d5e" {
		t.Errorf("observed detail = %#v, want an object with lease", obs["detail"])
	}
	wantNull(t, "expire ttl_ms", exp["ttl_ms"])
	wantNull(t, "expire detail", exp["detail"])
	if exp["inferred"] != true {
		t.Errorf("expire inferred = %v, want true", exp["inferred"])
	}
	if rej["resource"] != "orders-db" || rej["request_id"] != "req-1" {
		t.Errorf("write_rejected = %v", rej)
	}

	t.Run("Kind", func(t *testing.T) {
		events := list(t, f.getJSON(t, base+"?kind=grant", http.StatusOK), "events")
		if len(events) != 1 || events[0]["kind"] != "grant" {
			t.Fatalf("kind=grant: %v", events)
		}
	})
	t.Run("Window", func(t *testing.T) {
		q := "?from=" + url.QueryEscape(t0.Add(time.Second).Format(time.RFC3339Nano)) +
			"&to=" + url.QueryEscape(t0.Add(10*time.Minute).Format(time.RFC3339Nano))
		events := list(t, f.getJSON(t, base+q, http.StatusOK), "events")
		if len(events) != 2 || events[0]["kind"] != "expire" || events[1]["kind"] != "grant" {
			t.Fatalf("window: %v", events)
		}
	})
	t.Run("LimitKeepsNewest", func(t *testing.T) {
		events := list(t, f.getJSON(t, base+"?limit=1", http.StatusOK), "events")
		if len(events) != 1 || events[0]["kind"] != "write_rejected" {
			t.Fatalf("limit=1: %v", events)
		}
	})
}

func TestAPITenures(t *testing.T) {
	f := newFixture(t)
	tenures := list(t, f.getJSON(t, "/api/v1/locks/"+itoa(f.orders.ID)+"/tenures", http.StatusOK), "tenures")
	if len(tenures) != 2 {
		t.Fatalf("got %d tenures, want 2", len(tenures))
	}
	for _, tn := range tenures {
		wantKeys(t, "tenure", tn, "seq", "holder", "token", "granted_at", "observed", "first_seen_at", "renewals",
			"last_renewed_at", "lease_duration_ms", "expires_at", "ended_at", "end", "pruned_renewals")
	}
	old, cur := tenures[0], tenures[1]
	// Held when the collector started: the grant time is unknown.
	wantNull(t, "observed granted_at", old["granted_at"])
	wantTime(t, "observed first_seen_at", old["first_seen_at"], t0)
	wantNumber(t, "old token", old["token"], 41)
	wantNumber(t, "old renewals", old["renewals"], 3)
	wantTime(t, "old ended_at", old["ended_at"], t0.Add(13*time.Second))
	if old["end"] != "expired" || old["holder"] != "worker-1" || old["observed"] != true {
		t.Errorf("old tenure = %v", old)
	}
	wantTime(t, "current granted_at", cur["granted_at"], t0.Add(10*time.Minute))
	wantNull(t, "current ended_at", cur["ended_at"])
	wantNull(t, "current end", cur["end"])
	wantNumber(t, "current lease_duration_ms", cur["lease_duration_ms"], 10000)

	wantNull(t, "old pruned_renewals", old["pruned_renewals"])

	t.Run("PrunedRenewals", func(t *testing.T) {
		f.pruneRenewals(t)
		tenures := list(t, f.getJSON(t, "/api/v1/locks/"+itoa(f.orders.ID)+"/tenures", http.StatusOK), "tenures")
		p, ok := tenures[0]["pruned_renewals"].(map[string]any)
		if !ok {
			t.Fatalf("old tenure's pruned_renewals = %v, want an object", tenures[0]["pruned_renewals"])
		}
		wantKeys(t, "pruned_renewals", p, "renewals", "first", "last", "min_margin_ratio")
		wantNumber(t, "pruned renewals", p["renewals"], 3)
		wantTime(t, "first pruned", p["first"], t0.Add(time.Second))
		wantTime(t, "last pruned", p["last"], t0.Add(3*time.Second))
		wantNumber(t, "least margin", p["min_margin_ratio"], 0.3)
		wantNumber(t, "renewals still counted", tenures[0]["renewals"], 3)
		wantNull(t, "current pruned_renewals", tenures[1]["pruned_renewals"])
	})

	t.Run("NullToken", func(t *testing.T) {
		tenures := list(t, f.getJSON(t, "/api/v1/locks/"+itoa(f.hostile.ID)+"/tenures", http.StatusOK), "tenures")
		if len(tenures) != 1 {
			t.Fatalf("got %d tenures, want 1", len(tenures))
		}
		wantNull(t, "token", tenures[0]["token"])
		wantNull(t, "last_renewed_at", tenures[0]["last_renewed_at"])
	})
}

func TestAPIFindings(t *testing.T) {
	f := newFixture(t)
	findings := list(t, f.getJSON(t, "/api/v1/findings", http.StatusOK), "findings")
	if len(findings) != 3 {
		t.Fatalf("got %d findings, want 3", len(findings))
	}
	for _, fd := range findings {
		wantKeys(t, "finding", fd, "id", "lock_id", "source", "lock_name", "kind", "severity", "at", "until",
			"summary", "tokens", "holders", "resource")
	}
	first := findings[0]
	if first["kind"] != "lease_expired" || first["severity"] != "warning" {
		t.Errorf("findings[0] = %v, want lease_expired first (time order)", first)
	}
	wantNumber(t, "lock_id", first["lock_id"], float64(f.orders.ID))
	wantNull(t, "instant until", first["until"])

	t.Run("Filters", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			want  int
		}{
			{"lock=" + itoa(f.orders.ID), 2},
			{"lock=" + itoa(f.hostile.ID), 1},
			{"kind=stale_write", 1},
			{"severity=warning", 2},
			{"severity=critical", 0},
			{"resource=orders-db", 1},
			{"limit=1", 1},
		} {
			got := list(t, f.getJSON(t, "/api/v1/findings?"+tc.query, http.StatusOK), "findings")
			if len(got) != tc.want {
				t.Errorf("%s: got %d findings, want %d", tc.query, len(got), tc.want)
			}
		}
	})

	t.Run("Shape", func(t *testing.T) {
		got := list(t, f.getJSON(t, "/api/v1/findings?kind=stale_write", http.StatusOK), "findings")
		fd := got[0]
		wantTime(t, "until", fd["until"], t0.Add(11*time.Minute+1500*time.Millisecond))
		tokens, _ := fd["tokens"].([]any)
		holders, _ := fd["holders"].([]any)
		if len(tokens) != 2 || tokens[0] != 41.0 || tokens[1] != 42.0 {
			t.Errorf("tokens = %#v, want [41 42]", fd["tokens"])
		}
		if len(holders) != 2 || holders[0] != "worker-1" {
			t.Errorf("holders = %#v", fd["holders"])
		}
		if fd["resource"] != "orders-db" || fd["source"] != "prod-etcd" || fd["lock_name"] != "/locks/orders" {
			t.Errorf("finding = %v", fd)
		}
		got = list(t, f.getJSON(t, "/api/v1/findings?kind=unfenced_lock", http.StatusOK), "findings")
		if tokens, ok := got[0]["tokens"].([]any); !ok || len(tokens) != 0 {
			t.Errorf("tokens of a finding without any = %#v, want []", got[0]["tokens"])
		}
	})
}

func TestAPIErrors(t *testing.T) {
	f := newFixture(t)
	id := itoa(f.orders.ID)
	for _, tc := range []struct {
		name, target string
		status       int
		want         string
	}{
		{"NonNumericID", "/api/v1/locks/abc", 400, "id"},
		{"ZeroID", "/api/v1/locks/0", 400, "id"},
		{"MissingLock", "/api/v1/locks/999999", 404, "999999"},
		{"MissingLockEvents", "/api/v1/locks/999999/events", 404, ""},
		{"MissingLockTenures", "/api/v1/locks/999999/tenures", 404, ""},
		{"BadIDEvents", "/api/v1/locks/x1/events", 400, "id"},
		{"BadIDTenures", "/api/v1/locks/-3/tenures", 400, "id"},
		{"BadFrom", "/api/v1/locks/" + id + "/events?from=yesterday", 400, "from"},
		{"BadTo", "/api/v1/locks/" + id + "/tenures?to=2025-13-01T00:00:00Z", 400, "to"},
		{"ToBeforeFrom", "/api/v1/findings?from=2025-03-02T00:00:00Z&to=2025-03-01T00:00:00Z", 400, "to"},
		{"BadLimit", "/api/v1/locks?limit=ten", 400, "limit"},
		{"ZeroLimit", "/api/v1/findings?limit=0", 400, "limit"},
		{"NegativeLimit", "/api/v1/locks/" + id + "/events?limit=-1", 400, "limit"},
		{"BadClass", "/api/v1/locks?class=mutex", 400, "class"},
		{"BadState", "/api/v1/locks?state=locked", 400, "state"},
		{"BadLocksFrom", "/api/v1/locks?from=1700000000", 400, "from"},
		{"BadEventKind", "/api/v1/locks/" + id + "/events?kind=acquire", 400, "kind"},
		{"BadFindingKind", "/api/v1/findings?kind=gap", 400, "kind"},
		{"BadSeverity", "/api/v1/findings?severity=high", 400, "severity"},
		{"BadFindingLock", "/api/v1/findings?lock=orders", 400, "lock"},
		{"MissingFindingLock", "/api/v1/findings?lock=999999", 404, ""},
		{"UnknownRoute", "/api/v1/nope", 404, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, f.getJSON(t, tc.target, tc.status), tc.want)
		})
	}
	t.Run("WrongMethod", func(t *testing.T) {
		res, _ := f.do(t, http.MethodDelete, "/api/v1/locks/"+id, nil)
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("DELETE lock = %d, want 405", res.StatusCode)
		}
	})
}

// TestAPIPagesByCursor: following next from the newest page back visits every
// event, and every finding, of the list once and in order, although three
// share each instant; the last page's next is null, and a cursor that is not
// one answers 400.
func TestAPIPagesByCursor(t *testing.T) {
	f := newFixture(t)
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/paged"}
	b := audit.Batch{Locks: []audit.TrackState{{Lock: audit.Lock{Source: key.Source, Name: key.Name, Kind: audit.KindEtcd,
		Class: audit.ClassLock, State: audit.StateFree, ChangedAt: t0}}}}
	const n = 7
	for i := range n {
		at := t0.Add(time.Duration(i/3) * time.Second)
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at, Holder: "worker-1",
			Token: audit.Int64(1), Resource: "db", RequestID: fmt.Sprintf("paged-%d", i)})
		b.Findings = append(b.Findings, audit.Finding{Lock: key, Kind: audit.FindingUnfencedWrite, Severity: audit.SeverityCritical,
			At: at, Summary: fmt.Sprintf("write %d", i), Tokens: []int64{1, 2}, Resource: "db"})
	}
	if err := f.store.Apply(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	l, err := f.store.LockByKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, base, list, field string }{
		{"Events", "/api/v1/locks/" + itoa(l.ID) + "/events?limit=2", "events", "request_id"},
		{"Findings", "/api/v1/findings?lock=" + itoa(l.ID) + "&limit=2", "findings", "summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := list(t, f.getJSON(t, strings.Replace(tc.base, "limit=2", "limit=100", 1), http.StatusOK), tc.list)
			if len(all) != n {
				t.Fatalf("unpaged: %d items, want %d", len(all), n)
			}
			var paged []map[string]any
			target := tc.base
			for pages := 0; ; pages++ {
				if pages > n {
					t.Fatal("next never ends")
				}
				m := f.getJSON(t, target, http.StatusOK)
				paged = append(list(t, m, tc.list), paged...)
				next, _ := m["next"].(string)
				if m["next"] == nil {
					break
				}
				if next == "" {
					t.Fatalf("next = %#v, want a string or null", m["next"])
				}
				target = tc.base + "&before=" + url.QueryEscape(next)
			}
			if len(paged) != n {
				t.Fatalf("paged: %d items, want %d", len(paged), n)
			}
			for i := range all {
				if paged[i][tc.field] != all[i][tc.field] {
					t.Errorf("item %d: paged %v, unpaged %v", i, paged[i][tc.field], all[i][tc.field])
				}
			}
			if m := f.getJSON(t, strings.Replace(tc.base, "limit=2", "limit=100", 1), http.StatusOK); m["next"] != nil {
				t.Errorf("a page that was not full has next %v", m["next"])
			}
			exact := strings.Replace(tc.base, "limit=2", "limit="+itoa(n), 1)
			if m := f.getJSON(t, exact, http.StatusOK); len(list(t, m, tc.list)) != n || m["next"] != nil {
				t.Errorf("the page holding the last item (%d of %d) has next %v, want null", len(list(t, m, tc.list)), n, m["next"])
			}
			for _, bad := range []string{"yesterday", "12-", "-4", "12-0", "12--3", "1-2-3"} {
				wantError(t, f.getJSON(t, tc.base+"&before="+url.QueryEscape(bad), http.StatusBadRequest), "before")
			}
		})
	}
}
