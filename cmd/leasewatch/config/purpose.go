package config

import (
	"fmt"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// PurposeConfig is one entry of purposes: what the locks of a source, or
// those whose names match a pattern, or both, are for. A lock no entry
// names is for correctness: its safety verdict expects every write to be
// fenced. One declared for efficiency only avoids duplicate work, so its
// unfenced writes are expected.
//
//	purposes:
//	  - source: cache-redis   # every lock of this source
//	    purpose: efficiency
//	  - lock: "warmers/*"     # a path.Match pattern, as in alerts.rules
//	    purpose: efficiency
type PurposeConfig struct {
	Source  string `yaml:"source"`
	Lock    string `yaml:"lock"`
	Purpose string `yaml:"purpose"`
}

// VerdictPurposes returns the purpose rules of the safety verdict.
func (c *Config) VerdictPurposes() verdict.Purposes {
	out := make(verdict.Purposes, 0, len(c.Purposes))
	for _, p := range c.Purposes {
		out = append(out, verdict.PurposeRule{Selector: audit.Selector{Source: p.Source, Lock: p.Lock}, Purpose: verdict.Purpose(p.Purpose)})
	}
	return out
}

// validatePurposes checks purposes, naming the entry and field.
func validatePurposes(purposes []PurposeConfig, sources []SourceConfig) error {
	seen := make(map[[2]string]int)
	for i, p := range purposes {
		field := fmt.Sprintf("purposes[%d]", i)
		switch {
		case p.Source == "" && p.Lock == "":
			return fmt.Errorf("%s: names neither a source nor a lock pattern", field)
		case p.Source != "" && !slices.ContainsFunc(sources, func(s SourceConfig) bool { return s.Name == p.Source }):
			return fmt.Errorf("%s.source: %q is not the name of a configured source", field, p.Source)
		case p.Lock != "" && !audit.ValidPattern(p.Lock):
			return fmt.Errorf("%s.lock: %q is not a valid pattern (path.Match syntax: *, ?, [a-z], \\)", field, p.Lock)
		case p.Purpose == "":
			return fmt.Errorf("%s.purpose: required: %s or %s", field, verdict.PurposeCorrectness, verdict.PurposeEfficiency)
		case !verdict.Purpose(p.Purpose).Valid():
			return fmt.Errorf("%s.purpose: want %s or %s, not %q", field, verdict.PurposeCorrectness, verdict.PurposeEfficiency, p.Purpose)
		}
		if j, dup := seen[[2]string{p.Source, p.Lock}]; dup {
			return fmt.Errorf("%s: purposes[%d] already has this source and lock", field, j)
		}
		seen[[2]string{p.Source, p.Lock}] = i
	}
	return nil
}
