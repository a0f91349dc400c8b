// Package grafana_test checks the Grafana dashboard in this directory: it
// parses, every panel has a title and queries Prometheus through the
// dashboard's datasource variable, and every PromQL expression queries only
// metric families leasewatch exports.
package grafana_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/leasewatch/leasewatch/deploy/families"
)

const dashboardFile = "leasewatch.json"

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
}

// The dashboard's datasource variable, as panels reference it.
const (
	datasourceVar = "datasource"
	datasourceRef = "${datasource}"
)

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels returns the dashboard's panels, rows' panels included, rows not.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type != "row" {
			out = append(out, p)
		}
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid = %q, title = %q; want both set", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion = %d, want at least 36 (datasource references by uid)", d.SchemaVersion)
	}
	var ds *variable
	for i, v := range d.Templating.List {
		if v.Name == datasourceVar {
			ds = &d.Templating.List[i]
		}
	}
	switch {
	case ds == nil:
		t.Fatalf("no %q template variable", datasourceVar)
	case ds.Type != "datasource" || string(ds.Query) != `"prometheus"`:
		t.Errorf("variable %s: type %q, query %s; want a Prometheus datasource variable", datasourceVar, ds.Type, ds.Query)
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if p.Title == "" {
			t.Errorf("panel %d (%s) has no title", p.ID, p.Type)
		}
	}
	panels := allPanels(d.Panels)
	if len(panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	for _, p := range panels {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("%s: id also used by %q", name, prev)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			t.Errorf("%s (%s) has no title", name, p.Type)
		}
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("%s has no size", name)
		}
		if !usesDatasourceVar(p.Datasource) {
			t.Errorf("%s: datasource = %+v, want Prometheus uid %s", name, p.Datasource, datasourceRef)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s has no queries", name)
		}
		for _, q := range p.Targets {
			if q.Datasource != nil && !usesDatasourceVar(q.Datasource) {
				t.Errorf("%s query %s: datasource = %+v, want Prometheus uid %s", name, q.RefID, q.Datasource, datasourceRef)
			}
		}
	}
	// What the issue asks of the dashboard: a holder state timeline, expiry
	// countdowns and findings.
	for _, want := range []struct{ typ, metric string }{
		{"state-timeline", "leasewatch_lease_expiry_seconds"},
		{"bargauge", "leasewatch_lease_expiry_seconds"},
		{"timeseries", "leasewatch_findings_total"},
		{"state-timeline", "leasewatch_collector_blind"},
		{"timeseries", "leasewatch_observation_lag_seconds_bucket"},
	} {
		found := false
		for _, p := range panels {
			for _, q := range p.Targets {
				found = found || p.Type == want.typ && slices.Contains(families.Names(q.Expr), want.metric)
			}
		}
		if !found {
			t.Errorf("no %s panel over %s", want.typ, want.metric)
		}
	}
}

func usesDatasourceVar(ds *datasource) bool {
	return ds != nil && ds.Type == "prometheus" && ds.UID == datasourceRef
}

// varRef matches $name, ${name} and ${name:format} references.
var varRef = regexp.MustCompile(`\$(?:\{([A-Za-z0-9_]+)(?::[^}]*)?\}|([A-Za-z0-9_]+))`)

// TestDashboardQueries checks every PromQL expression, in panels and in
// template variables, queries only leasewatch's metric families and only
// variables the dashboard defines (or Grafana's own $__ ones).
func TestDashboardQueries(t *testing.T) {
	d := readDashboard(t)
	defined := map[string]bool{}
	for _, v := range d.Templating.List {
		defined[v.Name] = true
	}
	check := func(where, expr string) {
		t.Helper()
		if strings.TrimSpace(expr) == "" {
			t.Errorf("%s: empty expression", where)
			return
		}
		names := families.Names(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no leasewatch metric", where, expr)
		}
		if u := families.Unknown(expr); len(u) > 0 {
			t.Errorf("%s: %q queries unknown metric families %v", where, expr, u)
		}
		for _, m := range varRef.FindAllStringSubmatch(expr, -1) {
			v := m[1] + m[2]
			if !strings.HasPrefix(v, "__") && !defined[v] {
				t.Errorf("%s: %q uses undefined variable $%s", where, expr, v)
			}
		}
	}
	n := 0
	for _, p := range allPanels(d.Panels) {
		for _, q := range p.Targets {
			check(fmt.Sprintf("panel %q query %s", p.Title, q.RefID), q.Expr)
			n++
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			// A plain string query, as older dashboards store it.
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
				continue
			}
		}
		check("variable "+v.Name, q.Query)
		n++
	}
	if n == 0 {
		t.Fatal("no queries found")
	}
}
