package config

import (
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// flowStyle re-encodes a configuration with every mapping and sequence in
// flow style ({a: 1, b: [x, y]}), so several fields share a line. ok is
// false when config is not YAML.
func flowStyle(t *testing.T, config string) (flow string, ok bool) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(config), &doc); err != nil || doc.Kind == 0 {
		return "", false
	}
	var set func(n *yaml.Node)
	set = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
			n.Style = yaml.FlowStyle
		}
		for _, c := range n.Content {
			set(c)
		}
	}
	set(&doc)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatalf("re-encoding %q in flow style: %v", config, err)
	}
	return string(out), true
}

// quotedLine is a "(line N)" in a regexp.QuoteMeta'd message.
var quotedLine = regexp.MustCompile(`\\\(line \d+\\\)`)

// anyLine matches want with any number in its "(line N)": in flow style
// the lines differ.
func anyLine(want string) *regexp.Regexp {
	return regexp.MustCompile(quotedLine.ReplaceAllString(regexp.QuoteMeta(want), `\(line \d+\)`))
}

// parseFailsInEachStyle runs, as subtests Block and Flow, Parse on config as
// written and re-encoded in flow style; each must fail with an error that
// contains want (in flow style with any number in its "(line N)"). check, if not nil,
// checks the error further. A config that is not YAML has no flow style:
// then want must be the syntax error's.
func parseFailsInEachStyle(t *testing.T, config, want string, check func(t *testing.T, err error)) {
	t.Helper()
	run := func(config string, match *regexp.Regexp) func(t *testing.T) {
		return func(t *testing.T) {
			_, err := Parse([]byte(config))
			if err == nil {
				t.Fatalf("Parse accepted %q, want an error naming %q", config, want)
			}
			if !match.MatchString(err.Error()) {
				t.Fatalf("Parse(%q): error = %q, want it to name %q", config, err, want)
			}
			if check != nil {
				check(t, err)
			}
		}
	}
	t.Run("Block", run(config, regexp.MustCompile(regexp.QuoteMeta(want))))
	flow, ok := flowStyle(t, config)
	if !ok {
		if !strings.Contains(want, "not valid YAML") {
			t.Fatalf("%q is not YAML, but the test wants %q", config, want)
		}
		return
	}
	t.Run("Flow", run(flow, anyLine(want)))
}

// The flow style the tests get is flow style indeed: the two fields of the
// issue's example share a line.
func TestFlowStyle(t *testing.T) {
	flow, ok := flowStyle(t, "auth:\n  mode: basic\n  users: [\"alice:x\"]\n")
	if !ok || strings.Count(flow, "\n") != 1 || !strings.Contains(flow, "{auth: {mode: basic, users: [") {
		t.Fatalf("flow style = %q, want one line", flow)
	}
}

// The two examples: each names the field that is wrong, not the
// last scalar on the line.
func TestParseConfigFlowStyleNamesTheField(t *testing.T) {
	for _, tt := range []struct{ yaml, want, notWant string }{
		{`auth: {mode: basic, users: ["alice:$2y$12$abcdefghijklmnopqrstuu"]}`, "auth.users (line 1): cannot unmarshal !!seq", "auth.mode"},
		{`retention: {events: 0s, findings: -5d}`, `retention.events (line 1): "0s" is not a positive duration`, ""},
		{`retention: {events: 0s, findings: -5d}`, `retention.findings (line 1): "-5d" is not a number of days`, ""},
		{"sources: [{name: e, kind: etcd, endpoints: [x], prefixes: [/l/], endpoint: y}]", "sources[0].endpoint (line 1): ", ""},
		{"alerts: {rules: [{lock: x, lost_hold: 1m}, {lock: y, hold: 1m}]}", "alerts.rules[1].hold (line 1): ", "alerts.rules[0]"},
	} {
		_, err := Parse([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) || tt.notWant != "" && strings.Contains(err.Error(), tt.notWant) {
			t.Errorf("Parse(%q): err = %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
