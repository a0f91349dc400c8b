// Command gen writes prometheusrule.yaml from ../leasewatch-rules.yaml, and
// copies the rules into the Helm chart; go generate runs it in
// deploy/prometheus/operator.
package main

import (
	"fmt"
	"os"

	"github.com/leasewatch/leasewatch/deploy/prometheus/operator"
)

func main() {
	rules, err := os.ReadFile(operator.RulesFile)
	if err == nil {
		var out []byte
		if out, err = operator.PrometheusRule(rules); err == nil {
			err = os.WriteFile(operator.PrometheusRuleFile, out, 0o644)
		}
		if err == nil {
			err = os.WriteFile(operator.ChartRulesFile, rules, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
