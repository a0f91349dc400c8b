package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/audit"
)

// RetentionConfig is retention: how long the database keeps events and
// findings. Optional, added to the contract. Tenures (the holder timeline)
// and lock rows are always kept, and so is a summary of each tenure's pruned
// renewals.
//
//	retention:
//	  events: 90d          # every event kind not listed under kinds, renewals too
//	  kinds:
//	    write_accepted: 30d
//	  findings: forever
type RetentionConfig struct {
	Events   Age                     `yaml:"events"`
	Kinds    map[audit.EventKind]Age `yaml:"kinds"`
	Findings Age                     `yaml:"findings"`
}

// Defaults for omitted retention keys.
const (
	DefaultEventRetention   = 90 * Day
	DefaultFindingRetention = Forever
)

// Day is an Age unit.
const Day = Age(24 * time.Hour)

// Forever is the Age that keeps everything.
const Forever = Age(-1)

// Age is a retention period: a Go duration ("36h"), a number of days
// ("7d"), or "forever". The zero Age is unset: its default applies.
type Age time.Duration

// UnmarshalYAML reads an Age; errors carry the line, which Parse turns into
// the field's name.
func (a *Age) UnmarshalYAML(n *yaml.Node) error {
	v := strings.TrimSpace(n.Value)
	switch {
	case n.Kind != yaml.ScalarNode:
		return fmt.Errorf("line %d: want a duration such as 7d, 36h or forever", n.Line)
	case v == "forever":
		*a = Forever
		return nil
	case strings.HasSuffix(v, "d"):
		days, err := strconv.ParseFloat(strings.TrimSuffix(v, "d"), 64)
		if err != nil || days <= 0 || days > 100*365 {
			return fmt.Errorf("line %d: %q is not a number of days between 0 and 36500 (e.g. 7d)", n.Line, v)
		}
		*a = Age(days * float64(Day))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("line %d: %q is not a positive duration such as 7d, 36h or forever", n.Line, v)
	}
	*a = Age(d)
	return nil
}

// keep returns the Age as a retention duration: zero keeps forever.
func (a Age) keep() time.Duration {
	if a < 0 {
		return 0
	}
	return time.Duration(a)
}

// String formats a as the configuration writes it.
func (a Age) String() string {
	switch {
	case a == Forever:
		return "forever"
	case a > 0 && time.Duration(a)%time.Duration(Day) == 0:
		return strconv.FormatInt(int64(time.Duration(a)/time.Duration(Day)), 10) + "d"
	}
	return time.Duration(a).String()
}

func (r *RetentionConfig) fillDefaults() {
	if r.Events == 0 {
		r.Events = DefaultEventRetention
	}
	if r.Findings == 0 {
		r.Findings = DefaultFindingRetention
	}
}

func (r *RetentionConfig) validate() error {
	for k, a := range r.Kinds {
		if !k.Valid() {
			return fmt.Errorf("kinds.%s: unknown event kind; want one of %v", k, audit.EventKinds)
		}
		if a == 0 {
			return fmt.Errorf("kinds.%s: want a duration such as 7d, 36h or forever", k)
		}
	}
	return nil
}

// Policy returns the retention the store applies.
func (r RetentionConfig) Policy() audit.Retention {
	p := audit.Retention{Events: r.Events.keep(), Findings: r.Findings.keep(), Kinds: make(map[audit.EventKind]time.Duration, len(r.Kinds))}
	for k, a := range r.Kinds {
		p.Kinds[k] = a.keep()
	}
	return p
}
