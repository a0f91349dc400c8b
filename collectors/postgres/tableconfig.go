package postgres

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// TableEntry is one entry of a source's tables in the configuration file:
// a preset, with the overrides it allows, or a mapping of any table, its
// keys TableMapping's fields in snake case; or, with fence, a fenced table
// (FenceMapping: table, key, fence, lock or lock_column, and holder).
type TableEntry struct {
	// Preset names a known lease table (PresetNames); Table then
	// overrides its table name (jobs.shedlock), Duration its lease where
	// it has one after a renewal, and Clock its clock (ShedLock's
	// usingDbTime() writes the database's).
	Preset string `yaml:"preset"`

	Table          string         `yaml:"table"`
	Key            []string       `yaml:"key"`
	Names          []string       `yaml:"names"`
	Holder         string         `yaml:"holder"`
	Expires        string         `yaml:"expires"`
	Renewed        string         `yaml:"renewed"`
	Duration       time.Duration  `yaml:"duration"`
	DurationColumn string         `yaml:"duration_column"`
	Granted        string         `yaml:"granted"`
	Token          string         `yaml:"token"`
	HeldIf         map[string]any `yaml:"held_if"`
	Clock          Clock          `yaml:"clock"`
	Class          audit.Class    `yaml:"class"`
	// Poll says to poll the mapped table rather than stream it (a table
	// the server cannot publish, UNLOGGED); a preset knows its own way.
	Poll bool `yaml:"poll"`

	// Fence makes the entry a fenced table: the column of each row's
	// fencing token. Lock or LockColumn names the lock it is fenced by.
	Fence      string `yaml:"fence"`
	Lock       string `yaml:"lock"`
	LockColumn string `yaml:"lock_column"`
}

// Table is a lease table as the collector watches it, or a fenced table.
type Table struct {
	Mapping TableMapping
	// Polled: read every PollEvery, since the server cannot publish it;
	// otherwise streamed.
	Polled bool
	// Fence, when set, makes the table a fenced table, always streamed,
	// and Mapping and Polled unused.
	Fence *FenceMapping
}

// name is the table's name.
func (t Table) name() string {
	if t.Fence != nil {
		return t.Fence.Table
	}
	return t.Mapping.Table
}

// check returns the table's first problem, naming its field.
func (t Table) check() error {
	if t.Fence != nil {
		return t.Fence.Check()
	}
	return t.Mapping.Check()
}

// table returns the entry's table, or the first problem, naming its key.
func (e TableEntry) table() (Table, error) {
	switch {
	case e.Preset == "" && (e.Fence != "" || e.Lock != "" || e.LockColumn != ""):
		return e.fence()
	case e.Preset == "":
		return e.mapping()
	}
	p, ok := LookupPreset(e.Preset)
	if !ok {
		return Table{}, fmt.Errorf("preset: %q is none of %s", e.Preset, strings.Join(PresetNames(), ", "))
	}
	if k := e.mappingKey(); k != "" {
		return Table{}, fmt.Errorf("%s: a preset takes only table, duration and clock; give a full mapping instead", k)
	}
	m := p.Mapping
	if e.Table != "" {
		m.Table = e.Table
	}
	if e.Duration != 0 {
		if m.Duration == 0 {
			return Table{}, fmt.Errorf("duration: preset %s's lease runs out at its %s column, not after a duration", e.Preset, m.Expires)
		}
		m.Duration = e.Duration
	}
	if e.Clock != "" {
		m.Clock = e.Clock
	}
	if err := m.Check(); err != nil {
		return Table{}, err
	}
	return Table{Mapping: m, Polled: !p.Publishable}, nil
}

// mappingKey names the first key set that only a full mapping takes.
func (e TableEntry) mappingKey() string {
	return e.firstSet("key", "names", "holder", "expires", "renewed", "duration_column", "granted", "token", "held_if",
		"class", "poll", "fence", "lock", "lock_column")
}

// firstSet returns the first of keys that e sets, in the order of the
// configuration page; "" if it sets none of them.
func (e TableEntry) firstSet(keys ...string) string {
	set := []struct {
		key string
		set bool
	}{
		{"key", len(e.Key) > 0}, {"names", len(e.Names) > 0}, {"holder", e.Holder != ""}, {"expires", e.Expires != ""},
		{"renewed", e.Renewed != ""}, {"duration", e.Duration != 0}, {"duration_column", e.DurationColumn != ""},
		{"granted", e.Granted != ""}, {"token", e.Token != ""}, {"held_if", len(e.HeldIf) > 0}, {"clock", e.Clock != ""},
		{"class", e.Class != ""}, {"poll", e.Poll}, {"fence", e.Fence != ""}, {"lock", e.Lock != ""},
		{"lock_column", e.LockColumn != ""},
	}
	for _, k := range set {
		if k.set && slices.Contains(keys, k.key) {
			return k.key
		}
	}
	return ""
}

// mapping is the entry's full mapping.
func (e TableEntry) mapping() (Table, error) {
	m := TableMapping{
		Table: e.Table, Key: e.Key, Names: e.Names, Holder: e.Holder, Expires: e.Expires, Renewed: e.Renewed,
		Duration: e.Duration, DurationColumn: e.DurationColumn, Granted: e.Granted, Token: e.Token,
		Clock: e.Clock, Class: e.Class,
	}
	for _, col := range slices.Sorted(maps.Keys(e.HeldIf)) {
		v := e.HeldIf[col]
		if i, ok := v.(int); ok {
			v = int64(i) // YAML's integers decode as int
		}
		m.HeldIf = append(m.HeldIf, Match{Column: col, Value: v})
	}
	if err := m.Check(); err != nil {
		return Table{}, err
	}
	return Table{Mapping: m, Polled: e.Poll}, nil
}

// checkTables checks each table and that no table is given twice.
func checkTables(ts []Table) error {
	for i, t := range ts {
		if err := t.check(); err != nil {
			return audit.Errorf(audit.EINVALID, "tables[%d].%v", i, err)
		}
		for j, u := range ts[:i] {
			if u.name() == t.name() {
				return audit.Errorf(audit.EINVALID, "tables[%d].table: %s is tables[%d] already", i, t.name(), j)
			}
		}
	}
	return nil
}

// tables returns the entries' tables; an error names the entry and its key
// (tables[1].holder: ...).
func tables(es []TableEntry) ([]Table, error) {
	ts := make([]Table, 0, len(es))
	for i, e := range es {
		t, err := e.table()
		if err != nil {
			return nil, audit.Errorf(audit.EINVALID, "tables[%d].%v", i, err)
		}
		ts = append(ts, t)
	}
	return ts, nil
}
