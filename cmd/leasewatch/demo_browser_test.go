package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/web/browsertest"
)

// The demo as a new user sees it in a browser a minute after it started
// (and, with LEASEWATCH_DEMO_MINUTES=10, ten minutes after): the orders
// lock's timeline opens on the lock's history rather than squeezing it into
// the right-most pixels of an hour, and says so; short exposures are marks
// above the lanes, not spans across them; the overview's strips fit the
// history too; the findings page folds the short exposures. The screenshots go to the artifacts directory
// ($LEASEWATCH_ARTIFACTS).
//
// It runs with LEASEWATCH_DEMO_MINUTES set (make demo-screenshots), not in
// make test: a minute of the whole demo and Chromium under the race
// detector, beside the other packages' tests, starves their timing bounds
// on 2 cores.
func TestDemoInABrowser(t *testing.T) {
	minutes, err := strconv.Atoi(os.Getenv("LEASEWATCH_DEMO_MINUTES"))
	if err != nil || minutes < 1 {
		t.Skip("LEASEWATCH_DEMO_MINUTES is not set: run make demo-screenshots")
	}
	chromium := browsertest.ChromiumPath(t)
	base := startDemo(t)
	started := time.Now()
	b := browsertest.Start(t, chromium, base)
	artifacts := browsertest.ArtifactsDir(t)
	ages := []time.Duration{time.Minute}
	if minutes > 1 {
		ages = append(ages, time.Duration(minutes)*time.Minute)
	}
	var locks struct{ Locks []apiLock }
	getJSON(t, base, "/api/v1/locks?name="+url.QueryEscape(demoOrdersLock), &locks)
	if len(locks.Locks) != 1 {
		t.Fatalf("the demo's %s: %+v", demoOrdersLock, locks.Locks)
	}
	orders := fmt.Sprintf("/locks/%d", locks.Locks[0].ID)

	for _, age := range ages {
		// What is tested is the demo at this age: there is nothing to poll
		// for before it.
		time.Sleep(time.Until(started.Add(age)))
		name := fmt.Sprintf("demo-%dm", int(age.Minutes()))
		t.Run(name, func(t *testing.T) {
			b.T = t
			b.Open(orders)
			note := browsertest.Eval[string](b, "read the window note", `(document.querySelector("p.window-note") || {textContent: ""}).textContent`)
			first := browsertest.Eval[float64](b, "place the first tenure", `(() => {
				const svg = document.querySelector("svg.timeline");
				const xs = [...svg.querySelectorAll("a.tenure rect.bar")].map(r => r.x.baseVal.value);
				return Math.min(...xs) / svg.viewBox.baseVal.width;
			})()`)
			marks := browsertest.Eval[float64](b, "count the exposure marks", `document.querySelectorAll("svg.timeline a.hazard.mark").length`)
			spans := browsertest.Eval[float64](b, "measure the exposure spans", `(() => {
				const svg = document.querySelector("svg.timeline");
				const ws = [...svg.querySelectorAll("a.hazard.exposure:not(.mark) rect.hazard-edge")].map(r => r.width.baseVal.value);
				return ws.reduce((a, w) => a + w, 0) / svg.viewBox.baseVal.width;
			})()`)
			if !strings.Contains(note, "history began") || first > 0.35 {
				t.Errorf("orders' timeline: note %q, first tenure at %.0f%% of the width; want a window fitted to the history, which begins at the left", note, 100*first)
			}
			if marks == 0 || spans > 0.1 {
				t.Errorf("orders' exposures: %v marks, spans over %.0f%% of the width; want short exposures as marks, few spans", marks, 100*spans)
			}
			b.Screenshot(artifacts, name+"-orders.png")
			b.NoConsoleErrors("the orders lock page")

			b.Open("/")
			label := browsertest.Eval[string](b, "read the strips' span", `[...document.querySelectorAll("th")].map(th => th.textContent.trim()).find(s => s.startsWith("Last ")) || ""`)
			strips := browsertest.Eval[float64](b, "count the strips", `document.querySelectorAll("svg.strip").length`)
			if label == "" || label == "Last hour" || strips == 0 {
				t.Errorf("overview: %v strips spanning %q; want strips fitted to the demo's history", strips, label)
			}
			b.Screenshot(artifacts, name+"-overview.png")
			b.NoConsoleErrors("the overview")

			// The demo's exposures last milliseconds: they share a row per
			// lock and resource, so the other findings show.
			b.Open("/findings")
			rows := browsertest.Eval[float64](b, "count the findings rows", `document.querySelectorAll("table.findings tbody tr").length`)
			folds := browsertest.Eval[float64](b, "count the folded exposure rows", `document.querySelectorAll("table.findings tbody a[href*='kind=exposure']").length`)
			exposureRows := browsertest.Eval[float64](b, "count the exposure rows", `[...document.querySelectorAll("table.findings tbody tr")].filter(tr => tr.cells[2].textContent.trim() === "exposure").length`)
			if folds == 0 || exposureRows > rows/2 {
				t.Errorf("findings page: %v rows, %v of them exposures, %v folded; want the short exposures folded", rows, exposureRows, folds)
			}
			b.Screenshot(artifacts, name+"-findings.png")
			b.NoConsoleErrors("the findings page")
		})
	}
}
