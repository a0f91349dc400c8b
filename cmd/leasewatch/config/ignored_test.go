package config

import (
	"slices"
	"strings"
	"testing"
)

// A key of a source kind other than the source's has no effect there, so it
// is refused, naming it: patterns on an etcd source, say. The table is the
// contract; every key of a source must be in it.
func TestParseConfigRefusesKeysOfAnotherKind(t *testing.T) {
	keys := map[string]struct {
		kinds []string // the kinds the key applies to
		value string
	}{
		"name":                 {[]string{"etcd", "kubernetes", "postgres", "redis", "zookeeper"}, "s"},
		"kind":                 {[]string{"etcd", "kubernetes", "postgres", "redis", "zookeeper"}, "etcd"},
		"username":             {[]string{"etcd", "postgres", "redis", "zookeeper"}, "u"},
		"password":             {[]string{"etcd", "postgres", "redis", "zookeeper"}, "p"},
		"password_file":        {[]string{"etcd", "postgres", "redis", "zookeeper"}, "/run/pw"},
		"password_env":         {[]string{"etcd", "postgres", "redis", "zookeeper"}, "PW"},
		"tls":                  {[]string{"etcd", "postgres", "redis", "zookeeper"}, "{}"},
		"endpoints":            {[]string{"etcd"}, `["h:2379"]`},
		"prefixes":             {[]string{"etcd"}, `["/locks/"]`},
		"kubeconfig":           {[]string{"kubernetes"}, "/etc/kubeconfig"},
		"context":              {[]string{"kubernetes"}, "staging"},
		"namespaces":           {[]string{"kubernetes"}, "[default]"},
		"heartbeat_namespaces": {[]string{"kubernetes"}, "[kube-node-lease]"},
		"addr":                 {[]string{"redis"}, "h:6379"},
		"addrs":                {[]string{"redis"}, `["a:1", "b:1", "c:1"]`},
		"quorum":               {[]string{"redis"}, "2"},
		"db":                   {[]string{"redis"}, "1"},
		"patterns":             {[]string{"redis"}, `["lock:*"]`},
		"token":                {[]string{"redis"}, `{counter_key: "{key}:fence"}`},
		"servers":              {[]string{"zookeeper"}, `["h:2181"]`},
		"chroot":               {[]string{"zookeeper"}, "/app"},
		"paths":                {[]string{"zookeeper"}, `["/locks"]`},
		"probe_sessions":       {[]string{"zookeeper"}, "true"},
		"url":                  {[]string{"postgres"}, "postgres://h/app"},
		"databases":            {[]string{"postgres"}, "[app]"},
		"poll_every":           {[]string{"postgres"}, "1s"},
		"advisory":             {[]string{"postgres"}, "false"},
		"tables":               {[]string{"postgres"}, "[{preset: shedlock}]"},
	}
	if got, want := slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	}), sourceKeys(); !slices.Equal(got, want) {
		t.Fatalf("the table has keys %q, a source %q", got, want)
	}
	base := map[string]string{
		"etcd":       "sources:\n  - name: s\n    kind: etcd\n    endpoints: [\"h:2379\"]\n    prefixes: [\"/locks/\"]\n",
		"kubernetes": "sources:\n  - name: s\n    kind: kubernetes\n",
		"postgres":   "sources:\n  - name: s\n    kind: postgres\n    url: postgres://h/app\n",
		"redis":      "sources:\n  - name: s\n    kind: redis\n    addr: h:6379\n    patterns: [\"lock:*\"]\n",
		"zookeeper":  "sources:\n  - name: s\n    kind: zookeeper\n    servers: [\"h:2181\"]\n    paths: [\"/locks\"]\n",
	}
	for kind, config := range base {
		if _, err := Parse([]byte(config)); err != nil {
			t.Fatalf("%s source: %v", kind, err)
		}
		for key, k := range keys {
			if slices.Contains(k.kinds, kind) {
				continue
			}
			t.Run(kind+"/"+key, func(t *testing.T) {
				want := "sources[0]." + key + ": applies only to " + strings.Join(k.kinds, " and ") + " sources, not " + kind
				parseFailsInEachStyle(t, config+"    "+key+": "+k.value+"\n", want, nil)
			})
		}
	}
}

// A file that would be ignored, in whole or in part, is refused: an empty
// one (a ConfigMap key mounted wrong, a file truncated), and a second
// document after ---.
func TestParseConfigRefusesIgnoredDocuments(t *testing.T) {
	for name, tt := range map[string]struct{ yaml, want string }{
		"Empty":                 {"", "config sets nothing"},
		"OnlyWhiteSpace":        {" \n\n", "config sets nothing"},
		"OnlyComments":          {"# listen: 0.0.0.0:8080\n", "config sets nothing"},
		"Null":                  {"~\n", "config sets nothing"},
		"EmptyDocument":         {"---\n", "config sets nothing"},
		"SecondDocument":        {"listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n", "line 2: a second YAML document"},
		"EmptySecondDocument":   {"listen: 127.0.0.1:1\n---\n", "line 2: a second YAML document"},
		"SecondDocumentNotYAML": {"listen: 127.0.0.1:1\n---\nlisten: [\n", "not valid YAML"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%q): err = %v, want %q", tt.yaml, err, tt.want)
			}
		})
	}
	// {} is every default, said on purpose.
	cfg, err := Parse([]byte("{}\n"))
	if err != nil || cfg.Listen != DefaultListen {
		t.Fatalf("Parse({}) = %+v, %v; want the defaults", cfg, err)
	}
	// A document end marker ends the one document; it starts no other.
	if _, err := Parse([]byte("listen: 127.0.0.1:1\n...\n")); err != nil {
		t.Fatalf("a document ending in ...: %v", err)
	}
}

// Where zero means "the default" (in a Config built in code, a key left
// out), a zero written in the file is refused, since it would silently get
// the default: metrics.max_lock_series: 0 does not mean "no lock series".
func TestParseConfigRefusesZeroThatMeansTheDefault(t *testing.T) {
	const redlock = "sources:\n  - name: r\n    kind: redis\n    addrs: [\"a:1\", \"b:1\", \"c:1\"]\n    patterns: [\"l:*\"]\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"MaxLockSeries", "metrics:\n  max_lock_series: 0\n", "metrics.max_lock_series (line 2): 0 would silently mean the default"},
		{"RenewMarginRatio", "alerts:\n  renew_margin_ratio: 0.0\n", "alerts.renew_margin_ratio (line 2): 0.0 would silently mean the default"},
		{"BlindAfter", "alerts:\n  blind_after: 0s\n", "alerts.blind_after (line 2): 0s would"},
		{"FencingHold", "alerts:\n  fencing_hold: 0m\n", "alerts.fencing_hold (line 2): 0m would"},
		{"LostHold", "alerts:\n  lost_hold: 0s\n", "alerts.lost_hold (line 2): 0s would"},
		{"RuleLostHold", "alerts:\n  rules:\n    - lock: x\n      fencing_hold: 1m\n      lost_hold: 0s\n", "alerts.rules[0].lost_hold (line 5): 0s would"},
		{"RuleRatio", "alerts:\n  rules:\n    - lock: x\n      renew_margin_ratio: 0\n      lost_hold: 1m\n", "alerts.rules[0].renew_margin_ratio (line 4): 0 would"},
		{"ResendEvery", "alerts:\n  alertmanager:\n    resend_every: 0s\n", "alerts.alertmanager.resend_every (line 3): 0s would"},
		{"Timeout", "alerts:\n  alertmanager:\n    timeout: 0s\n", "alerts.alertmanager.timeout (line 3): 0s would"},
		{"Queue", "alerts:\n  alertmanager:\n    queue: 0\n", "alerts.alertmanager.queue (line 3): 0 would"},
		{"Quorum", redlock + "    quorum: 0\n", "sources[0].quorum (line 6): 0 would"},
	} {
		t.Run(tt.name, func(t *testing.T) { parseFailsInEachStyle(t, tt.yaml, tt.want, nil) })
	}
	// Null is no value: the default, as for a key left out.
	cfg, err := Parse([]byte("metrics:\n  max_lock_series: ~\n"))
	if err != nil || cfg.Metrics.LockSeries() != DefaultMaxLockSeries {
		t.Fatalf("max_lock_series: ~ gives %+v, %v; want the default", cfg, err)
	}
}
