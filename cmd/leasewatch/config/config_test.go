package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/redis"
)

func TestParseConfigContractExample(t *testing.T) {
	cfg, err := Parse([]byte(`
listen: 127.0.0.1:9090
database: /var/lib/leasewatch/lw.db
ingest_tokens: ["change-me"]
alerts:
  renew_margin_ratio: 0.3
sources:
  - name: prod-etcd
    kind: etcd
    endpoints: ["127.0.0.1:2379"]
    prefixes: ["/locks/", "/election/"]
  - name: cluster-a
    kind: kubernetes
    kubeconfig: ~/.kube/config
    namespaces: []
    heartbeat_namespaces: [kube-node-lease]
  - name: cache
    kind: redis
    addr: 127.0.0.1:6379
    patterns: ["lock:*"]
    token: {counter_key: "{key}:fence"}
  - name: cache-redlock
    kind: redis
    addrs: ["127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"]
    patterns: ["lock:*"]
    token: {value_pattern: '^(?P<token>\d+):(?P<holder>.+)$'}
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if cfg.Listen != "127.0.0.1:9090" || cfg.Database != "/var/lib/leasewatch/lw.db" || cfg.Alerts.RenewMarginRatio != 0.3 {
		t.Fatalf("config = %+v", cfg)
	}
	if s := sectionOf[etcd.Section](t, cfg.Sources[0]); cfg.Sources[0].Name != "prod-etcd" || len(s.Prefixes) != 2 || s.Endpoints[0] != "127.0.0.1:2379" {
		t.Fatalf("source = %+v", s)
	}
	if s := sectionOf[kubernetes.Section](t, cfg.Sources[1]); s.Kubeconfig != "~/.kube/config" || s.Namespaces == nil || len(s.Namespaces) != 0 || s.HeartbeatNamespaces[0] != "kube-node-lease" {
		t.Fatalf("kubernetes source = %+v", s)
	}
	if s := sectionOf[redis.Section](t, cfg.Sources[2]); s.Addr != "127.0.0.1:6379" || s.Token.CounterKey != "{key}:fence" {
		t.Fatalf("redis source = %+v", s)
	}
	if s := sectionOf[redis.Section](t, cfg.Sources[3]); len(s.Addrs) != 3 || s.Token.ValuePattern != `^(?P<token>\d+):(?P<holder>.+)$` {
		t.Fatalf("redlock source = %+v", s)
	}
}

// A kubernetes source may pick a kubeconfig context other than the current
// one; without the key it is empty, and the current context applies.
func TestParseConfigKubernetesContext(t *testing.T) {
	cfg, err := Parse([]byte(`
sources:
  - name: staging
    kind: kubernetes
    kubeconfig: /etc/leasewatch/kubeconfig
    context: staging-admin
    heartbeat_namespaces: [kube-node-lease, node-heartbeats]
  - name: current
    kind: kubernetes
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s := sectionOf[kubernetes.Section](t, cfg.Sources[0]); s.Context != "staging-admin" || s.Kubeconfig != "/etc/leasewatch/kubeconfig" ||
		!slices.Equal(s.HeartbeatNamespaces, []string{"kube-node-lease", "node-heartbeats"}) {
		t.Fatalf("source with a context = %+v", s)
	}
	if s := sectionOf[kubernetes.Section](t, cfg.Sources[1]); s.Context != "" || s.Kubeconfig != "" {
		t.Fatalf("source without kubeconfig or context = %+v, want both empty (client-go's defaults)", s)
	}
	t.Run("Misspelt", func(t *testing.T) {
		parseFailsInEachStyle(t, "sources:\n  - name: k\n    kind: kubernetes\n    contxt: staging\n", "sources[0].contxt", nil)
	})
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := Parse([]byte("{}"))
	if err != nil {
		t.Fatalf("Parse({}): %v", err)
	}
	if cfg.Listen != DefaultListen || cfg.Database != DefaultDatabase || cfg.Alerts.RenewMarginRatio != DefaultRenewMarginRatio {
		t.Fatalf("defaults = %+v", cfg)
	}
	if a := cfg.Alerts; a.BlindAfter != DefaultBlindAfter || a.FencingHold != DefaultFencingHold || a.LostHold != DefaultLostHold ||
		a.IncludeHeartbeats || len(a.Rules) != 0 {
		t.Fatalf("alerts defaults = %+v", a)
	}
}

// The alerts section beyond renew_margin_ratio: durations in Go's syntax,
// the heartbeat opt-in, and rules per source and lock pattern, handed to the
// evaluator as they were written.
func TestParseConfigAlertRules(t *testing.T) {
	cfg, err := Parse([]byte(`
alerts:
  renew_margin_ratio: 0.3
  blind_after: 45s
  fencing_hold: 1h
  lost_hold: 10m
  include_heartbeats: true
  rules:
    - source: prod-etcd
      blind_after: 2m
    - lock: "/locks/billing-*"
      renew_margin_ratio: 0.5
    - source: prod-etcd
      lock: "/locks/billing-ledger"
      fencing_hold: 24h
      lost_hold: 1h
sources:
  - name: prod-etcd
    kind: etcd
    endpoints: ["127.0.0.1:2379"]
    prefixes: ["/locks/"]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	got := cfg.Alerts.Alert()
	want := alert.Config{
		Defaults:          alert.Thresholds{RenewMarginRatio: 0.3, BlindAfter: 45 * time.Second, FencingHold: time.Hour, LostHold: 10 * time.Minute},
		IncludeHeartbeats: true,
		Rules: []alert.Rule{
			{Selector: audit.Selector{Source: "prod-etcd"}, Thresholds: alert.Thresholds{BlindAfter: 2 * time.Minute}},
			{Selector: audit.Selector{Lock: "/locks/billing-*"}, Thresholds: alert.Thresholds{RenewMarginRatio: 0.5}},
			{Selector: audit.Selector{Source: "prod-etcd", Lock: "/locks/billing-ledger"}, Thresholds: alert.Thresholds{FencingHold: 24 * time.Hour, LostHold: time.Hour}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("alert config = %+v\nwant %+v", got, want)
	}
	th := got.For("prod-etcd", "/locks/billing-ledger")
	if th.RenewMarginRatio != 0.5 || th.FencingHold != 24*time.Hour || th.LostHold != time.Hour {
		t.Fatalf("thresholds of prod-etcd//locks/billing-ledger = %+v", th)
	}
	if d := got.For("prod-etcd", "").BlindAfter; d != 2*time.Minute {
		t.Fatalf("prod-etcd blind_after = %v, want 2m", d)
	}
}

func TestParseConfigHealth(t *testing.T) {
	defaults, err := Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := defaults.Health.Tracker(), (audit.HealthConfig{FlappingPerHour: 6, LeaderlessAfter: time.Minute, TightMarginRatio: 0.4, ClockSkewRatio: 0.1}); got != want {
		t.Fatalf("default health = %+v, want %+v", got, want)
	}
	if got := defaults.CommitInterval; got != 400*time.Millisecond {
		t.Fatalf("default commit_interval = %v, want 400ms", got)
	}
	if cfg, err := Parse([]byte("commit_interval: 1ns\n")); err != nil {
		t.Fatal(err)
	} else if got := cfg.CommitInterval; got != time.Nanosecond {
		t.Fatalf("commit_interval: 1ns parsed as %v", got)
	}
	if got := defaults.Dashboard.GroupExposuresUnder; got != time.Second {
		t.Fatalf("default dashboard.group_exposures_under = %v, want 1s", got)
	}
	if cfg, err := Parse([]byte("dashboard:\n  group_exposures_under: 250ms\n")); err != nil {
		t.Fatal(err)
	} else if got := cfg.Dashboard.GroupExposuresUnder; got != 250*time.Millisecond {
		t.Fatalf("dashboard.group_exposures_under: 250ms parsed as %v", got)
	}
	cfg, err := Parse([]byte("health:\n  flapping_per_hour: 12\n  leaderless_after: 5m\n  tight_renewal_margin_ratio: 0.5\n  clock_skew_ratio: 0.05\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Health.Tracker(), (audit.HealthConfig{FlappingPerHour: 12, LeaderlessAfter: 5 * time.Minute, TightMarginRatio: 0.5, ClockSkewRatio: 0.05}); got != want {
		t.Fatalf("health = %+v, want %+v", got, want)
	}
}

func TestParseConfigRetention(t *testing.T) {
	defaults, err := Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := defaults.Retention.Policy(), (audit.Retention{Events: 90 * 24 * time.Hour,
		Kinds: map[audit.EventKind]time.Duration{}}); !reflect.DeepEqual(got, want) {
		t.Errorf("default retention = %+v, want %+v", got, want)
	}

	cfg, err := Parse([]byte("retention:\n  events: forever\n  kinds:\n    renew: 36h\n    write_accepted: 1.5d\n    grant: forever\n  findings: 365d\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := audit.Retention{Findings: 365 * 24 * time.Hour, Kinds: map[audit.EventKind]time.Duration{
		audit.EventRenew: 36 * time.Hour, audit.EventWriteAccepted: 36 * time.Hour, audit.EventGrant: 0}}
	if got := cfg.Retention.Policy(); !reflect.DeepEqual(got, want) {
		t.Errorf("retention = %+v, want %+v", got, want)
	}
	if s := cfg.Retention.Findings.String(); s != "365d" {
		t.Errorf("365d prints as %q", s)
	}

	// Renewals not named are kept as long as the other events.
	cfg, err = Parse([]byte("retention:\n  events: 30d\n  kinds:\n    write_rejected: 7d\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rules := cfg.Retention.Policy().EventRules(); len(rules) != 2 || !rules[1].Governs(audit.EventRenew) || rules[1].Age != 30*24*time.Hour {
		t.Errorf("retention rules = %+v, want renewals under events' 30 days", rules)
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	etcd := "  - name: e\n    kind: etcd\n    endpoints: [\"127.0.0.1:2379\"]\n    prefixes: [\"/locks/\"]\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"UnknownTopLevelField", "listne: 1.2.3.4:80\n", "listne"},
		{"UnknownSourceField", "sources:\n  - name: e\n    kind: etcd\n    endpoint: x\n", "sources[0].endpoint"},
		{"WrongType", "alerts:\n  renew_margin_ratio: lots\n", "alerts.renew_margin_ratio"},
		{"RatioOutOfRange", "alerts:\n  renew_margin_ratio: 1.5\n", "alerts.renew_margin_ratio"},
		{"BadListen", "listen: localhost\n", "listen"},
		{"EmptyIngestToken", "ingest_tokens: [\"ok\", \"\"]\n", "ingest_tokens[1]"},
		{"IngestTokenLeadingSpace", "ingest_tokens: [\"ok\", \" tok\"]\n", "ingest_tokens[1]: has white space at its start or end"},
		{"IngestTokenTrailingNewline", "ingest_tokens:\n  - ok\n  - |\n    tok\n", "ingest_tokens[1]: has white space at its start or end"},
		{"IngestTokenControl", "ingest_tokens: [\"to\\x00k\"]\n", "ingest_tokens[0]: holds a control character"},
		{"MissingName", "sources:\n  - kind: etcd\n", "sources[0].name"},
		{"SlashInName", "sources:\n  - name: a/b\n    kind: etcd\n", "sources[0].name"},
		{"UnknownKind", "sources:\n  - name: x\n    kind: consul\n", "sources[0].kind"},
		{"UnknownTokenRuleField", "sources:\n  - name: r\n    kind: redis\n    addr: a:1\n    patterns: [\"l:*\"]\n    token: {counter: \"{key}:f\"}\n", "sources[0].token.counter"},
		{"RedisNoAddr", "sources:\n  - name: r\n    kind: redis\n    patterns: [\"lock:*\"]\n", "sources[0].addr"},
		{"RedisAddrAndAddrs", "sources:\n  - name: r\n    kind: redis\n    addr: a:1\n    addrs: [\"b:1\"]\n    patterns: [\"l:*\"]\n", "sources[0].addrs"},
		{"RedisNoPatterns", "sources:\n  - name: r\n    kind: redis\n    addr: a:1\n", "sources[0].patterns"},
		{"RedisQuorumTooSmall", "sources:\n  - name: r\n    kind: redis\n    addrs: [\"a:1\", \"b:1\", \"c:1\"]\n    quorum: 1\n    patterns: [\"l:*\"]\n", "sources[0].quorum"},
		{"RedisTwoTokenRules", "sources:\n  - name: r\n    kind: redis\n    addr: a:1\n    patterns: [\"l:*\"]\n    token: {counter_key: \"{key}:f\", value_pattern: \"x\"}\n", "sources[0].token"},
		{"BadNamespace", "sources:\n  - name: k\n    kind: kubernetes\n    namespaces: [\"Kube_System\"]\n", "sources[0].namespaces[0]"},
		{"BadHeartbeatNamespace", "sources:\n  - name: k\n    kind: kubernetes\n    heartbeat_namespaces: [\"\"]\n", "sources[0].heartbeat_namespaces[0]"},
		{"NoEndpoints", "sources:\n  - name: x\n    kind: etcd\n    prefixes: [\"/l/\"]\n", "sources[0].endpoints"},
		{"NoPrefixes", "sources:\n  - name: x\n    kind: etcd\n    endpoints: [\"h:1\"]\n", "sources[0].prefixes"},
		{"DuplicateName", "sources:\n" + etcd + etcd, "sources[1].name"},
		{"NotYAML", "listen: [\n", "not valid YAML"},
		{"BlindAfterNotADuration", "alerts:\n  blind_after: soon\n", "alerts.blind_after"},
		{"BlindAfterBareNumber", "alerts:\n  blind_after: 30\n", "alerts.blind_after"},
		{"BlindAfterNegative", "alerts:\n  blind_after: -1s\n", "alerts.blind_after"},
		{"FencingHoldNegative", "alerts:\n  fencing_hold: -5m\n", "alerts.fencing_hold"},
		{"LostHoldNegative", "alerts:\n  lost_hold: -5m\n", "alerts.lost_hold"},
		{"IncludeHeartbeatsNotABool", "alerts:\n  include_heartbeats: sometimes\n", "alerts.include_heartbeats"},
		{"UnknownAlertsField", "alerts:\n  renew_margin: 0.3\n", "alerts.renew_margin"},
		{"RulesNotAList", "alerts:\n  rules: {lock: x}\n", "alerts.rules"},
		{"UnknownRuleField", "alerts:\n  rules:\n    - lock: x\n      hold: 1m\n", "alerts.rules[0].hold"},
		{"RuleEverywhere", "alerts:\n  rules:\n    - lost_hold: 1m\n", "alerts.rules[0]: names neither"},
		{"RuleUnknownSource", "sources:\n" + etcd + "alerts:\n  rules:\n    - source: prod\n      lost_hold: 1m\n", "alerts.rules[0].source"},
		{"RuleBadPattern", "alerts:\n  rules:\n    - lock: x\n      lost_hold: 1m\n    - lock: \"/locks/[orders\"\n      lost_hold: 1m\n", "alerts.rules[1].lock"},
		{"RuleRatioOutOfRange", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n      renew_margin_ratio: 1\n", "alerts.rules[0].renew_margin_ratio"},
		{"RuleRatioNegative", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n      renew_margin_ratio: -0.1\n", "alerts.rules[0].renew_margin_ratio"},
		{"RuleBlindAfterPerLock", "sources:\n" + etcd + "alerts:\n  rules:\n    - source: e\n      lock: \"/locks/*\"\n      blind_after: 1m\n", "alerts.rules[0].blind_after"},
		{"RuleNoThreshold", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n", "alerts.rules[0]: sets no threshold"},
		{"RuleNegativeHold", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n      fencing_hold: -1m\n", "alerts.rules[0].fencing_hold"},
		{"RuleNegativeLostHold", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n      lost_hold: -1m\n", "alerts.rules[0].lost_hold"},
		{"RuleNegativeBlindAfter", "sources:\n" + etcd + "alerts:\n  rules:\n    - source: e\n      blind_after: -1m\n", "alerts.rules[0].blind_after"},
		{"RuleHoldNotADuration", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n      lost_hold: long\n", "alerts.rules[0].lost_hold"},
		{"DuplicateRule", "alerts:\n  rules:\n    - lock: \"/locks/*\"\n      lost_hold: 1m\n    - lock: \"/locks/*\"\n      fencing_hold: 1m\n", "alerts.rules[1]: rules[0] already"},
		{"PurposeEverywhere", "purposes:\n  - purpose: efficiency\n", "purposes[0]: names neither"},
		{"PurposeUnknownSource", "sources:\n" + etcd + "purposes:\n  - source: prod\n    purpose: efficiency\n", "purposes[0].source"},
		{"PurposeBadPattern", "purposes:\n  - lock: \"[a\"\n    purpose: efficiency\n", "purposes[0].lock"},
		{"PurposeMissing", "purposes:\n  - lock: \"warm-*\"\n", "purposes[0].purpose: required"},
		{"PurposeUnknown", "purposes:\n  - lock: \"warm-*\"\n    purpose: speed\n", "purposes[0].purpose: want correctness or efficiency"},
		{"PurposeUnknownField", "purposes:\n  - lock: \"warm-*\"\n    purpose: efficiency\n    reason: cache\n", "purposes[0].reason"},
		{"PurposeDuplicate", "purposes:\n  - lock: \"warm-*\"\n    purpose: efficiency\n  - lock: \"warm-*\"\n    purpose: correctness\n", "purposes[1]: purposes[0] already"},
		{"RetentionNotADuration", "retention:\n  events: soon\n", "retention.events (line 2)"},
		{"RetentionZeroDays", "retention:\n  findings: 0d\n", "retention.findings"},
		{"RetentionNegative", "retention:\n  events: -1h\n", "retention.events"},
		{"RetentionBareNumber", "retention:\n  events: 90\n", "retention.events"},
		{"RetentionUnknownKind", "retention:\n  kinds:\n    renw: 7d\n", "retention.kinds.renw: unknown event kind"},
		{"RetentionKindEmpty", "retention:\n  kinds:\n    grant: \"\"\n", "retention.kinds.grant"},
		{"RetentionUnknownField", "retention:\n  renewals: 7d\n", "retention.renewals"},
		{"RetentionKindsNotAMap", "retention:\n  kinds: [renew]\n", "retention.kinds"},
		{"HealthFlappingZero", "health:\n  flapping_per_hour: 0\n", "health.flapping_per_hour"},
		{"HealthFlappingTooMany", "health:\n  flapping_per_hour: 101\n", "health.flapping_per_hour: 101 is outside 1..100"},
		{"HealthFlappingNotANumber", "health:\n  flapping_per_hour: often\n", "health.flapping_per_hour"},
		{"HealthLeaderlessTooShort", "health:\n  leaderless_after: 10ms\n", "health.leaderless_after: 10ms is shorter than 1s"},
		{"HealthLeaderlessNotADuration", "health:\n  leaderless_after: soon\n", "health.leaderless_after"},
		{"HealthTightRatioOne", "health:\n  tight_renewal_margin_ratio: 1\n", "health.tight_renewal_margin_ratio: 1 is outside (0, 1)"},
		{"HealthSkewNegative", "health:\n  clock_skew_ratio: -0.1\n", "health.clock_skew_ratio"},
		{"HealthUnknownField", "health:\n  flap_per_hour: 3\n", "health.flap_per_hour"},
		{"CommitIntervalZero", "commit_interval: 0s\n", "commit_interval"},
		{"CommitIntervalNegative", "commit_interval: -1ms\n", "commit_interval: -1ms is negative"},
		{"CommitIntervalTooLong", "commit_interval: 6s\n", "commit_interval: 6s is longer than 5s"},
		{"CommitIntervalNotADuration", "commit_interval: often\n", "commit_interval"},
		{"DashboardGroupZero", "dashboard:\n  group_exposures_under: 0s\n", "dashboard.group_exposures_under"},
		{"DashboardGroupNegative", "dashboard:\n  group_exposures_under: -1s\n", "dashboard.group_exposures_under: -1s is negative"},
		{"DashboardGroupNotADuration", "dashboard:\n  group_exposures_under: short\n", "dashboard.group_exposures_under"},
		{"DashboardUnknownField", "dashboard:\n  group_exposure_under: 1s\n", "dashboard.group_exposure_under"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { parseFailsInEachStyle(t, tt.yaml, tt.want, nil) })
	}
}

func TestParsePurposes(t *testing.T) {
	cfg, err := Parse([]byte("sources:\n  - name: cache\n    kind: redis\n    addr: 127.0.0.1:6379\n    patterns: [\"lock:*\"]\npurposes:\n  - source: cache\n    purpose: efficiency\n  - source: cache\n    lock: \"ledger-*\"\n    purpose: correctness\n"))
	if err != nil {
		t.Fatal(err)
	}
	ps := cfg.VerdictPurposes()
	if got := ps.For("cache", "thumbnails"); got != verdict.PurposeEfficiency {
		t.Errorf("cache/thumbnails is for %s, want efficiency", got)
	}
	if got := ps.For("cache", "ledger-eu"); got != verdict.PurposeCorrectness {
		t.Errorf("cache/ledger-eu is for %s, want correctness", got)
	}
}

func TestLoadConfigIngestTokensFile(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# rotated 2026-11\nnew-token\n\n  old-token  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(body string) string {
		p := filepath.Join(dir, "lw.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := Load(write("ingest_tokens: [a]\ningest_tokens_file: " + tokens + "\n"))
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if want := []string{"a", "new-token", "old-token"}; !slices.Equal(cfg.IngestTokens, want) {
		t.Fatalf("tokens = %q, want %q", cfg.IngestTokens, want)
	}
	// A token the server could never match is refused, naming the line
	// and never quoting the token.
	control := filepath.Join(dir, "control")
	if err := os.WriteFile(control, []byte("good\nbad\x7fs3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(write("ingest_tokens_file: " + control + "\n"))
	if want := "ingest_tokens_file: " + control + " line 2: holds a control character"; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("token with a control character: err = %v, want %q", err, want)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# no tokens yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"Missing": "ingest_tokens_file: " + filepath.Join(dir, "nope") + "\n",
		"Empty":   "ingest_tokens_file: " + empty + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(write(body)); err == nil || !strings.Contains(err.Error(), "ingest_tokens_file") {
				t.Fatalf("err = %v, want one naming ingest_tokens_file", err)
			}
		})
	}
}

// etcd and redis sources take credentials and TLS; the password may come
// from a file or an environment variable instead of the configuration.
func TestParseConfigSourceCredentials(t *testing.T) {
	cfg, err := Parse([]byte(`
sources:
  - name: prod-etcd
    kind: etcd
    endpoints: ["https://etcd-0:2379"]
    prefixes: ["/locks/"]
    username: leasewatch
    password_file: /run/secrets/etcd-password
    tls:
      ca_file: /etc/leasewatch/etcd/ca.crt
      cert_file: /etc/leasewatch/etcd/client.crt
      key_file: /etc/leasewatch/etcd/client.key
  - name: cache
    kind: redis
    addrs: ["redis-0:6380", "redis-1:6380", "redis-2:6380"]
    patterns: ["lock:*"]
    username: leasewatch
    password_env: LEASEWATCH_REDIS_PASSWORD
    tls: {server_name: redis.internal, insecure_skip_verify: true}
  - name: plain
    kind: redis
    addr: 127.0.0.1:6379
    patterns: ["lock:*"]
    password: inline
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := SourceTLS{CAFile: "/etc/leasewatch/etcd/ca.crt", CertFile: "/etc/leasewatch/etcd/client.crt", KeyFile: "/etc/leasewatch/etcd/client.key"}
	if s := cfg.Sources[0]; s.Username != "leasewatch" || s.PasswordFile != "/run/secrets/etcd-password" || s.Password != "" || s.TLS == nil || *s.TLS != want {
		t.Fatalf("etcd source = %+v, tls %+v", s, s.TLS)
	}
	if s := cfg.Sources[1]; s.PasswordEnv != "LEASEWATCH_REDIS_PASSWORD" || s.TLS == nil || *s.TLS != (SourceTLS{ServerName: "redis.internal", InsecureSkipVerify: true}) {
		t.Fatalf("redis source = %+v, tls %+v", s, s.TLS)
	}
	if s := cfg.Sources[2]; s.Password != "inline" || s.TLS != nil {
		t.Fatalf("plain redis source = %+v, want its password and no tls", s)
	}
	// tls: {} turns TLS on with the system's roots.
	cfg, err = Parse([]byte("sources:\n  - name: r\n    kind: redis\n    addr: r:6380\n    patterns: [\"l:*\"]\n    tls: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := clientTLS(cfg.Sources[0].TLS)
	if err != nil || tc == nil || tc.RootCAs != nil || tc.GetClientCertificate != nil || tc.InsecureSkipVerify {
		t.Fatalf("tls: {} = %+v, %v; want TLS verified against the system's roots", tc, err)
	}
}

func TestParseConfigSourceCredentialsErrors(t *testing.T) {
	const secret = "hunter2-pw"
	redis := "sources:\n  - name: r\n    kind: redis\n    addr: r:6379\n    patterns: [\"l:*\"]\n"
	etcd := "sources:\n  - name: e\n    kind: etcd\n    endpoints: [\"e:2379\"]\n    prefixes: [\"/l/\"]\n"
	kube := "sources:\n  - name: k\n    kind: kubernetes\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"CertWithoutKey", redis + "    tls: {cert_file: c.crt}\n", "sources[0].tls.key_file: required with cert_file"},
		{"KeyWithoutCert", etcd + "    tls: {key_file: c.key}\n", "sources[0].tls.cert_file: required with key_file"},
		{"UnknownTLSField", redis + "    tls: {cafile: ca.crt}\n", "sources[0].tls.cafile"},
		{"SkipVerifyNotABool", redis + "    tls: {insecure_skip_verify: maybe}\n", "sources[0].tls.insecure_skip_verify"},
		{"TLSNotAMap", redis + "    tls: yes\n", "sources[0].tls"},
		{"PasswordAndFile", redis + "    password: " + secret + "\n    password_file: /run/pw\n", "sources[0].password_file: give one of password, password_file and password_env"},
		{"FileAndEnv", redis + "    password_file: /run/pw\n    password_env: PW\n", "sources[0].password_env: give one of"},
		{"BadEnvName", redis + "    password_env: REDIS-PASSWORD\n", `sources[0].password_env: "REDIS-PASSWORD" is not an environment variable name`},
		{"EtcdPasswordWithoutUser", etcd + "    password: " + secret + "\n", "sources[0].username: required with password"},
		{"EtcdPasswordFileWithoutUser", etcd + "    password_file: /run/pw\n", "sources[0].username: required with password_file"},
		{"EtcdUserWithoutPassword", etcd + "    username: leasewatch\n", "sources[0].password: required with username"},
		{"RedisUserWithoutPassword", redis + "    username: leasewatch\n", "sources[0].password: required with username"},
		{"EtcdTLSToHTTP", "sources:\n  - name: e\n    kind: etcd\n    endpoints: [\"https://e-0:2379\", \"http://e-1:2379\"]\n    prefixes: [\"/l/\"]\n    tls: {}\n",
			"sources[0].endpoints[1]: http://e-1:2379 is plain text, but tls is set"},
		{"RedisTLSToSocket", "sources:\n  - name: r\n    kind: redis\n    addr: /run/redis.sock\n    patterns: [\"l:*\"]\n    tls: {}\n",
			"sources[0].addr: /run/redis.sock is a Unix socket"},
		{"RedlockTLSToSocket", "sources:\n  - name: r\n    kind: redis\n    addrs: [\"r-0:6380\", \"unix:/run/redis.sock\", \"r-2:6380\"]\n    patterns: [\"l:*\"]\n    tls: {}\n",
			"sources[0].addrs[1]: unix:/run/redis.sock is a Unix socket"},
		{"KubernetesTLS", kube + "    tls: {ca_file: ca.crt}\n", "sources[0].tls: applies only to etcd and postgres and redis and zookeeper sources"},
		{"KubernetesUser", kube + "    username: admin\n    password: " + secret + "\n", "sources[0].username: applies only to etcd and postgres and redis and zookeeper sources"},
		{"KubernetesPasswordEnv", kube + "    password_env: PW\n", "sources[0].password_env: applies only"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parseFailsInEachStyle(t, tt.yaml, tt.want, func(t *testing.T, err error) {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows the password", err)
				}
			})
		})
	}
}

func TestLoadConfigSourcePassword(t *testing.T) {
	dir := t.TempDir()
	const base = "sources:\n  - name: e\n    kind: etcd\n    endpoints: [\"e:2379\"]\n    prefixes: [\"/l/\"]\n    username: leasewatch\n"
	pwFile := writeFile(t, dir, "etcd-password", "s3cret from a file\n")
	t.Setenv("LW_TEST_REDIS_PASSWORD", " s3cret from env ")
	cfg, err := Load(writeFile(t, dir, "lw.yaml", base+"    password_file: "+pwFile+"\n"+
		"  - name: r\n    kind: redis\n    addr: r:6379\n    patterns: [\"l:*\"]\n    password_env: LW_TEST_REDIS_PASSWORD\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	secret := func(i int) string {
		t.Helper()
		pw, err := cfg.Sources[i].Secret().Get()
		if err != nil {
			t.Fatalf("sources[%d] password: %v", i, err)
		}
		return pw
	}
	if got := secret(0); got != "s3cret from a file" {
		t.Errorf("password from password_file = %q, want the file's line", got)
	}
	// The collector reads the file on each connection: a rotated password
	// needs no restart.
	writeFile(t, dir, "etcd-password", "rotated s3cret\n")
	if got := secret(0); got != "rotated s3cret" {
		t.Errorf("password from password_file after a rotation = %q, want the file's new line", got)
	}
	if got := secret(1); got != "s3cret from env" {
		t.Errorf("password from password_env = %q, want the variable's value", got)
	}

	t.Setenv("LW_TEST_EMPTY_PASSWORD", "  ")
	for name, tt := range map[string]struct{ key, want string }{
		"MissingFile": {"password_file: " + filepath.Join(dir, "nope"), "sources[0].password_file: open "},
		"EmptyFile":   {"password_file: " + writeFile(t, dir, "empty", "\n"), "sources[0].password_file: " + filepath.Join(dir, "empty") + " is empty"},
		"UnsetEnv":    {"password_env: LW_TEST_UNSET_PASSWORD", "sources[0].password_env: environment variable LW_TEST_UNSET_PASSWORD is not set"},
		"EmptyEnv":    {"password_env: LW_TEST_EMPTY_PASSWORD", "sources[0].password_env: environment variable LW_TEST_EMPTY_PASSWORD is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeFile(t, dir, "lw.yaml", base+"    "+tt.key+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLoadConfigSourceTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	otherDir := t.TempDir()
	_, otherKey := writeSelfSigned(t, otherDir)
	source := func(tls string) string {
		return "sources:\n  - name: r\n    kind: redis\n    addr: r:6380\n    patterns: [\"l:*\"]\n    tls: {" + tls + "}\n"
	}
	cfg, err := Load(writeFile(t, dir, "lw.yaml", source("ca_file: "+cert+", cert_file: "+cert+", key_file: "+key+", server_name: redis.internal")))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	tc, err := clientTLS(cfg.Sources[0].TLS)
	if err != nil {
		t.Fatal(err)
	}
	if tc.RootCAs == nil || tc.GetClientCertificate == nil || tc.ServerName != "redis.internal" || tc.InsecureSkipVerify || tc.MinVersion != tls.VersionTLS12 {
		t.Fatalf("client TLS = %+v, want the CA, the client certificate and the server name", tc)
	}
	garbageKey := writeFile(t, dir, "garbage.key", "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n")
	for name, tt := range map[string]struct{ tls, want string }{
		"MissingCA":    {"ca_file: " + filepath.Join(dir, "nope.crt"), "sources[0].tls.ca_file: open "},
		"CAIsAKey":     {"ca_file: " + key, "sources[0].tls.ca_file: " + key + " holds no PEM certificate"},
		"MissingCert":  {"cert_file: " + filepath.Join(dir, "nope.crt") + ", key_file: " + key, "sources[0].tls.cert_file: open "},
		"MissingKey":   {"cert_file: " + cert + ", key_file: " + filepath.Join(dir, "nope.key"), "sources[0].tls.key_file: open "},
		"CertIsTheKey": {"cert_file: " + key + ", key_file: " + key, "sources[0].tls.cert_file: " + key + " holds no PEM certificate"},
		"KeyIsTheCert": {"cert_file: " + cert + ", key_file: " + cert, "sources[0].tls.key_file: " + cert + " is not the private key of cert_file"},
		"OtherKey":     {"cert_file: " + cert + ", key_file: " + otherKey, "sources[0].tls.key_file: " + otherKey + " is not the private key of cert_file"},
		"GarbageKey":   {"cert_file: " + cert + ", key_file: " + garbageKey, "sources[0].tls.key_file: "},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeFile(t, dir, "lw.yaml", source(tt.tls)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error %q shows key material", err)
			}
		})
	}
}

// sectionOf returns source s's backend section, of type T.
func sectionOf[T any](t *testing.T, s SourceConfig) *T {
	t.Helper()
	sec, ok := any(s.Backend).(*T)
	if !ok {
		t.Fatalf("source %s: section %T, want %T", s.Name, s.Backend, new(T))
	}
	return sec
}
