package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
)

// TestAlertsPage: the firing alerts link their lock's timeline around the
// alert, an alert about a source names it, resolved ones show when they
// ended, the near-expiry list is there, and label values from backends are
// text.
func TestAlertsPage(t *testing.T) {
	hostile := "<img src=x onerror=alert(1)>\x07"
	firing := []alert.Alert{
		{Labels: map[string]string{alert.LabelAlertName: alert.LeaseNearExpiry, alert.LabelSeverity: "warning",
			alert.LabelSource: "prod-etcd", alert.LabelLock: "/locks/orders", alert.LabelHolder: hostile},
			Annotations: map[string]string{alert.AnnotationSummary: hostile + " has 20% of its lease left"},
			StartsAt:    now.Add(-3 * time.Second)},
		{Labels: map[string]string{alert.LabelAlertName: alert.CollectorBlind, alert.LabelSeverity: "warning", alert.LabelSource: "cluster-a"},
			Annotations: map[string]string{alert.AnnotationSummary: "cluster-a has been blind for 1m"},
			StartsAt:    now.Add(-time.Minute)},
	}
	resolved := []alert.Alert{
		{Labels: map[string]string{alert.LabelAlertName: alert.FencingViolation, alert.LabelSeverity: "critical",
			alert.LabelSource: "prod-etcd", alert.LabelLock: "gone-lock"},
			Annotations: map[string]string{alert.AnnotationSummary: "overlap on gone-lock"},
			StartsAt:    now.Add(-20 * time.Minute), EndsAt: now.Add(-5 * time.Minute)},
	}
	f := newFixture(t, func(c *Config) {
		c.Alerts = func() ([]alert.Alert, []alert.Alert) { return firing, resolved }
	})
	body := f.page(t, "/alerts", http.StatusOK)
	if strings.Contains(body, "<img src=x") || strings.Contains(body, "\x07") {
		t.Fatal("the alerts page renders a holder from a backend as markup")
	}
	doc := htmlDoc(t, "/alerts", body)
	tables := doc.Find("table.grid")
	rows := tables.Eq(0).Find("tbody tr")
	if rows.Length() != 2 {
		t.Fatalf("firing rows = %d, want 2", rows.Length())
	}
	near := text(rows.Eq(0))
	if !strings.Contains(near, "LeaseNearExpiry") || !strings.Contains(near, "warning") || !strings.Contains(near, "<img src=x onerror=alert(1)>\uFFFD") {
		t.Errorf("near-expiry row = %q", near)
	}
	href := rows.Eq(0).Find("a").AttrOr("href", "")
	u, err := url.Parse(href)
	if err != nil || u.Path != "/locks/"+itoa(f.orders.ID) || u.Query().Get("from") == "" || u.Query().Get("to") == "" {
		t.Errorf("near-expiry row links %q, want the orders timeline around the alert", href)
	}
	if blind := text(rows.Eq(1)); !strings.Contains(blind, "CollectorBlind") || !strings.Contains(blind, "cluster-a") || rows.Eq(1).Find("a").Length() != 0 {
		t.Errorf("collector-blind row = %q, want the source, unlinked", blind)
	}
	if n := tables.Eq(1).Find("tbody tr").Length(); n != 1 || !strings.Contains(text(tables.Eq(1)), "/locks/orders") {
		t.Errorf("near-expiry list = %q, want orders", text(tables.Eq(1)))
	}
	gone := tables.Eq(2).Find("tbody tr")
	if gone.Length() != 1 || !strings.Contains(text(gone), "FencingViolation") || !strings.Contains(text(gone), "critical") || gone.Find("time").Length() != 2 {
		t.Errorf("resolved rows = %q, want the fencing violation with its start and end", text(gone))
	}
	if doc.Find(`nav a[href="/alerts"][aria-current="page"]`).Length() != 1 {
		t.Error("the navigation does not mark Alerts as the current page")
	}
}

func TestAlertsPageEmpty(t *testing.T) {
	f := newFixture(t)
	doc := htmlDoc(t, "/alerts", f.page(t, "/alerts", http.StatusOK))
	main := text(doc.Find("main"))
	for _, want := range []string{"No alert is firing.", "No alert has resolved since leasewatch started."} {
		if !strings.Contains(main, want) {
			t.Errorf("alerts page without alerts lacks %q", want)
		}
	}
}

// With replicas, the alerts page of one names the sources another owns,
// whose alerts it neither evaluates nor lists; without them it says nothing.
func TestAlertsPageNamesSourcesEvaluatedElsewhere(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Sources = func() []audit.Source {
			return []audit.Source{{Name: "prod-etcd", State: audit.SourceUp}, {Name: "cluster-a", State: audit.SourceStandby},
				{Name: "cache", State: audit.SourceStandby}}
		}
	})
	main := text(htmlDoc(t, "/alerts", f.page(t, "/alerts", http.StatusOK)).Find("main"))
	if want := "The alerts of cluster-a, cache are evaluated, sent and listed by the replica that owns them"; !strings.Contains(main, want) {
		t.Errorf("alerts page of a replica = %q, want %q", main, want)
	}
	if main := text(htmlDoc(t, "/alerts", newFixture(t).page(t, "/alerts", http.StatusOK)).Find("main")); strings.Contains(main, "replica") {
		t.Errorf("alerts page of one process mentions replicas: %q", main)
	}
}
