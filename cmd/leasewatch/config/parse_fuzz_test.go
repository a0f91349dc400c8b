package config

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/collectors"
)

// FuzzParse feeds Parse arbitrary configuration files. Whatever the file,
// Parse must not panic and must either
//
//   - fail with one line of text, or
//   - return a configuration that validates again, that SetDefaults leaves
//     as it is, and whose Redis sources the Redis collector takes: a
//     configuration Parse accepts is one `serve` can start from.
//
// Seeds: the contract's example and the shapes the tests use, plus
// what testdata/fuzz/FuzzParse holds. Run longer with
// go test -run '^$' -fuzz FuzzParse -fuzztime 10m ./cmd/leasewatch/config
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``,
		"listen: 127.0.0.1:8080\ndatabase: leasewatch.db\ningest_tokens: [\"change-me\"]\nalerts:\n  renew_margin_ratio: 0.25\n" +
			"sources:\n  - name: prod-etcd\n    kind: etcd\n    endpoints: [\"127.0.0.1:2379\"]\n    prefixes: [\"/locks/\", \"/election/\"]\n" +
			"  - name: cluster-a\n    kind: kubernetes\n    kubeconfig: ~/.kube/config\n    namespaces: []\n    heartbeat_namespaces: [kube-node-lease]\n" +
			"  - name: cache\n    kind: redis\n    addr: 127.0.0.1:6379\n    patterns: [\"lock:*\"]\n    token: {counter_key: \"{key}:fence\"}\n",
		"sources:\n  - name: r\n    kind: redis\n    addrs: [a:1, b:1, c:1]\n    quorum: 2\n    patterns: [\"lock:*\"]\n" +
			"    token: {value_pattern: '^(?P<token>\\d+):(?P<holder>.+)$'}\n",
		"alerts:\n  blind_after: 45s\n  fencing_hold: 1h\n  rules:\n    - source: prod-etcd\n      blind_after: 2m\n    - lock: \"/locks/billing-*\"\n      renew_margin_ratio: 0.5\n",
		"retention:\n  events: 90d\n  kinds:\n    renew: 7d\n  findings: forever\n",
		"auth:\n  mode: basic\n  users:\n    alice: \"$2y$12$abcdefghijklmnopqrstuu\"\n",
		"listen: 0.0.0.0:8080\nauth:\n  allow_open: true\n",
		"ingest_tokens_env: [LEASEWATCH_INGEST_TOKEN]\n",
		"sources:\n  - name: k\n    kind: kubernetes\n    contxt: staging\n",
		"sources:\n  - &a {name: x, kind: etcd, endpoints: [e], prefixes: [p]}\n  - *a\n",
		"listen: [1, 2]\n",
		"ingest_tokens:\n  s3cret: 1\n",
		"\t\x00",
		"sources:\n  - name: c\n    kind: redis\n    addrs: [a:1, a:1, b:1]\n    patterns: [\"lock:*\"]\n",
		"sources:\n  - name: c\n    kind: redis\n    addr: /run/redis.sock\n    tls: {}\n    patterns: [\"lock:*\"]\n",
		"sources:\n  - name: c\n    kind: redis\n    addr: h:1\n    patterns: [\"lock:*\"]\n    token: {value_pattern: '('}\n",
		"sources:\n  - name: c\n    kind: redis\n    addr: h:1\n    patterns: [\"lock:*\"]\n    token: {counter_key: 'fence'}\n",
		"auth: {mode: basic, users: [\"alice:x\"]}\n",
		"retention: {events: 0s, findings: -5d}\n",
		"base: &b {kind: etcd, endpoints: [e], prefixes: [p]}\n",
		"sources:\n  - &b {name: x, kind: etcd, endpoints: [e], prefixes: [p]}\n  - {<<: *b, name: y, endpoint: z}\n",
		"auth:\n  mode: basic\n  mode: proxy\n",
		"ingest_tokens: [\"ok\", \" padded \", \"ctl\\x01\"]\n",
		"{}\n",
		"# only a comment\n",
		"listen: 127.0.0.1:1\n---\nlisten: 127.0.0.1:2\n",
		"sources:\n  - name: e\n    kind: etcd\n    endpoints: [e]\n    prefixes: [p]\n    patterns: [\"lock:*\"]\n",
		"sources:\n  - {name: k, kind: kubernetes, token: {counter_key: c}}\n",
		"metrics: {max_lock_series: 0}\nalerts: {blind_after: 0s, rules: [{lock: x, lost_hold: 0s}]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFieldsAsTheDecoder(t, data)
		cfg, err := Parse(data)
		if err != nil {
			msg := err.Error()
			if msg == "" || strings.ContainsAny(msg, "\n\r") || !utf8.ValidString(msg) {
				t.Fatalf("error %q: want one line of text", msg)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted configuration fails validation again: %v", err)
		}
		before := *cfg
		cfg.SetDefaults()
		if !reflect.DeepEqual(before, *cfg) {
			t.Fatalf("SetDefaults changed an accepted configuration:\n%+v\nto\n%+v", before, *cfg)
		}
		for i, s := range cfg.Sources {
			if s.Kind != "redis" {
				continue
			}
			// As serve builds it (service.go), without reading TLS files
			// or secrets.
			var tlsConfig collectors.TLS
			if s.TLS != nil {
				tlsConfig = collectors.StaticTLS(&tls.Config{})
			}
			if _, err := s.Backend.Collector(collectors.Source{Name: s.Name, TLS: tlsConfig}, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatalf("sources[%d] accepted, but the Redis collector refuses it: %v", i, err)
			}
		}
	})
}

// checkFieldsAsTheDecoder checks that checkFields finds a problem in data
// exactly when yaml's decoder refuses it, so that every error Parse
// reports names its field, and Parse refuses nothing the decoder takes.
func checkFieldsAsTheDecoder(t *testing.T, data []byte) {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return
	}
	c := &fieldChecker{budget: maxCheckedNodes} // explicit zeros are Parse's, not the decoder's
	c.value(&doc, reflect.TypeFor[Config](), "")
	problems := c.problems
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(new(Config))
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if err != nil && strings.Contains(err.Error(), "excessive aliasing") {
		return // refused as a whole, no field to name
	}
	if (len(problems) > 0) != (err != nil) {
		t.Fatalf("checkFields found %q, the decoder %v", problems, err)
	}
}
