package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/alert/alertmanagertest"
)

// With the demo pointed at a real Alertmanager, the worker that pauses past
// its lease shows up there: near expiry, then lost, and the lost lease's
// alert resolves once another worker has the lock.
func TestDemoAlertsReachAlertmanager(t *testing.T) {
	am := alertmanagertest.Start(t)
	base := startDemo(t, "--alertmanager", am.URL)
	ctx := context.Background()

	// Alertmanager lists an alert while it fires; the pauser's alerts
	// last a second or two, and it pauses every few seconds.
	seen := map[string]bool{}
	var lost string // the fingerprint of a LeaseLost alert seen firing
	eventually(t, 60*time.Second, "LeaseNearExpiry and LeaseLost for /locks/orders in Alertmanager", func() bool {
		alerts, err := am.Alerts(ctx)
		if err != nil {
			t.Fatalf("read alerts: %v\n%s", err, am.Log())
		}
		for _, a := range alerts {
			if a.Labels[alert.LabelLock] != "/locks/orders" {
				continue
			}
			name := a.Labels[alert.LabelAlertName]
			if name == alert.LeaseLost && lost == "" && seen[alert.LeaseNearExpiry] {
				lost = a.Fingerprint
			}
			seen[name] = true
			if a.Labels[alert.LabelSource] != demoSource || a.Labels[alert.LabelSeverity] == "" || !strings.Contains(a.Annotations[alert.AnnotationSummary], "/locks/orders") {
				t.Errorf("alert %s: labels %v, annotations %v", name, a.Labels, a.Annotations)
			}
		}
		return seen[alert.LeaseNearExpiry] && lost != ""
	})
	eventually(t, 20*time.Second, "the lost lease's alert to resolve once the lock is granted again", func() bool {
		alerts, err := am.Alerts(ctx)
		if err != nil {
			t.Fatalf("read alerts: %v", err)
		}
		for _, a := range alerts {
			if a.Fingerprint == lost {
				return false
			}
		}
		return true
	})
	// Its /metrics, with every part of the demo running, the sender's
	// included, exposes no family that docs/metrics.md's table leaves out.
	everyFamilyDocumented(t, base)
}
