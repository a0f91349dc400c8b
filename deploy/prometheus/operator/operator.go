// Package operator makes the Prometheus Operator's objects for leasewatch:
// prometheusrule.yaml, a PrometheusRule generated from
// ../leasewatch-rules.yaml (its groups, comments and all, under spec), so
// the two cannot drift; and servicemonitor.yaml beside it, written by hand.
// `kubectl apply -k deploy/prometheus/operator` applies both. The same
// generation copies the rules into the Helm chart (ChartRulesFile), whose
// PrometheusRule template reads them there: a chart reads no file outside
// its directory.
package operator

//go:generate go run ./gen

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Files of the generation, relative to this package's directory.
const (
	RulesFile          = "../leasewatch-rules.yaml"
	PrometheusRuleFile = "prometheusrule.yaml"
	ChartRulesFile     = "../../helm/leasewatch/files/leasewatch-rules.yaml"
)

// header opens the generated file.
const header = `# Generated from deploy/prometheus/leasewatch-rules.yaml by
# go generate ./deploy/prometheus/operator (make generate): edit the rules
# there. The Prometheus Operator's PrometheusRule holding the same groups,
# for a Prometheus that selects rules by label (ruleSelector): add yours
# to metadata.labels, or set the selector to match these.
`

// PrometheusRule returns the PrometheusRule object whose spec is the rules
// file rules: its groups, comments kept.
func PrometheusRule(rules []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(rules, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", RulesFile, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping with groups", RulesFile)
	}
	spec := doc.Content[0]
	// The file's opening comment describes the rules: it goes with them.
	spec.HeadComment, doc.HeadComment = doc.HeadComment+spec.HeadComment, ""
	obj := mapping(
		"apiVersion", scalar("monitoring.coreos.com/v1"),
		"kind", scalar("PrometheusRule"),
		"metadata", mapping(
			"name", scalar("leasewatch"),
			"namespace", scalar("leasewatch"),
			"labels", mapping(
				"app.kubernetes.io/name", scalar("leasewatch"),
				"app.kubernetes.io/part-of", scalar("leasewatch"),
			),
		),
		"spec", spec,
	)
	var out bytes.Buffer
	out.WriteString(header)
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(obj); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// mapping makes a mapping node of key, value pairs.
func mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(kv); i += 2 {
		m.Content = append(m.Content, scalar(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return m
}
