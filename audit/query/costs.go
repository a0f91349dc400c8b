package query

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// What leases cost their backends: every grant, renewal and release a
// backend received for the locks of a window, counted from what the store
// keeps (tenures' renewal counts, and a lock's stored renewals where a
// tenure began before the window), grouped by lock, namespace, holder or
// source. docs/costs.md says what is counted and how.

// CostBy is what Costs groups writes by.
type CostBy string

// The groupings of Costs.
const (
	CostByLock      CostBy = "lock"
	CostByNamespace CostBy = "namespace"
	CostByHolder    CostBy = "holder"
	CostBySource    CostBy = "source"
)

// CostGroupings are the groupings Costs takes, in the order the API lists them.
var CostGroupings = []CostBy{CostByLock, CostByNamespace, CostByHolder, CostBySource}

// CostWindows are the windows Costs reads, ending at the reading: the last
// hour and the last day.
var CostWindows = []time.Duration{time.Hour, 24 * time.Hour}

// Limits of a Costs read's rows.
const (
	DefaultCostLimit = 10
	MaxCostLimit     = 1000
)

// Writes counts the writes a backend received for leases.
type Writes struct {
	Grants, Renewals, Releases int64
}

// Total is every write counted.
func (w Writes) Total() int64 { return w.Grants + w.Renewals + w.Releases }

func (w *Writes) add(o Writes) {
	w.Grants += o.Grants
	w.Renewals += o.Renewals
	w.Releases += o.Releases
}

// CostRow is one group's writes over a Costs window.
type CostRow struct {
	// Key is the group: the lock's name, the namespace, the holder or the
	// source's name.
	Key string
	// Source is the group's source (by lock and by namespace; the Key by
	// source); "" by holder, whose holders are counted across sources.
	Source string
	Kind   audit.SourceKind // the source's kind; "" by holder
	LockID int64            // by lock only
	Writes
	// PerSecond is Total over the window's length.
	PerSecond float64
}

// Costs is the writes of a window grouped one way: the groups with the
// most writes, and the totals of all.
type Costs struct {
	Window audit.TimeFilter // From and To, inclusive; To is the reading's time
	By     CostBy
	// Rows are the groups with the most writes, at most the limit asked,
	// most first; ties by source, then key, then lock id.
	Rows []CostRow
	// Groups counts the groups with a write; Total adds up their writes.
	Groups int
	Total  Writes
}

// Namespace is the namespace a lock's name is in, for grouping by
// namespace: a Kubernetes Lease's namespace (names are namespace/name);
// for the other backends the name's first path segment, without a leading
// slash (/locks/orders is in locks; a PostgreSQL advisory lock's database);
// a name without a slash is a namespace of its own.
func Namespace(kind audit.SourceKind, name string) string {
	if kind != audit.KindKubernetes {
		name = strings.TrimPrefix(name, "/")
	}
	if ns, _, ok := strings.Cut(name, "/"); ok {
		return ns
	}
	return name
}

// tenureWrites is one tenure's writes within a window.
type tenureWrites struct {
	audit.LockTenure
	Writes
}

// writeTally is every tenure's writes of one window, as read at To, and
// their groupings as asked for (groups), each added up once.
type writeTally struct {
	window  audit.TimeFilter
	tenures []tenureWrites
	groups  *groupings
}

// groupings keeps a tally's groupings, every group of each, in order.
type groupings struct {
	mu sync.Mutex
	by map[CostBy]Costs
}

// group returns t's writes per group of by, the top limit of them.
func (t writeTally) group(by CostBy, limit int) Costs {
	t.groups.mu.Lock()
	defer t.groups.mu.Unlock()
	all, ok := t.groups.by[by]
	if !ok {
		all = t.groupAll(by)
		t.groups.by[by] = all
	}
	out := all
	out.Rows = slices.Clone(all.Rows[:min(len(all.Rows), limit)])
	return out
}

// groupAll adds up t's writes per group of by, every group, most first.
func (t writeTally) groupAll(by CostBy) Costs {
	out := Costs{Window: t.window, By: by}
	rows := make(map[CostRow]*Writes)
	for _, tw := range t.tenures {
		if tw.Total() == 0 {
			continue
		}
		k := costKey(by, tw.LockTenure)
		w := rows[k]
		if w == nil {
			w = new(Writes)
			rows[k] = w
		}
		w.add(tw.Writes)
		out.Total.add(tw.Writes)
	}
	secs := t.window.To.Sub(t.window.From).Seconds()
	all := make([]CostRow, 0, len(rows))
	for k, w := range rows {
		k.Writes = *w
		if secs > 0 {
			k.PerSecond = float64(w.Total()) / secs
		}
		all = append(all, k)
	}
	slices.SortFunc(all, func(a, b CostRow) int {
		return cmp.Or(cmp.Compare(b.Total(), a.Total()), strings.Compare(a.Source, b.Source),
			strings.Compare(a.Key, b.Key), cmp.Compare(a.LockID, b.LockID))
	})
	out.Groups = len(all)
	out.Rows = all
	return out
}

// costKey is the group of tenure t by by, as a row without its counts.
func costKey(by CostBy, t audit.LockTenure) CostRow {
	switch by {
	case CostByNamespace:
		return CostRow{Key: Namespace(t.Kind, t.Lock.Name), Source: t.Lock.Source, Kind: t.Kind}
	case CostByHolder:
		return CostRow{Key: t.Holder}
	case CostBySource:
		return CostRow{Key: t.Lock.Source, Source: t.Lock.Source, Kind: t.Kind}
	default:
		return CostRow{Key: t.Lock.Name, Source: t.Lock.Source, Kind: t.Kind, LockID: t.LockID}
	}
}

// readTally counts every tenure's writes within window.
//
// A tenure granted within the window had all its renewals in it, and its
// renewal count says how many: no renewal is read. A tenure granted before
// the window and renewed since its start (one per lock, the one held
// across it) is the exception: its lock's renewals in the window are
// counted where they are stored (WriteLoadStore.RenewalCounts), less those
// of the lock's tenures granted within it.
func readTally(ctx context.Context, s audit.WriteLoadStore, window audit.TimeFilter) (writeTally, error) {
	tenures, err := s.TenuresIn(ctx, window)
	if err != nil {
		return writeTally{}, err
	}
	out := writeTally{window: window, tenures: make([]tenureWrites, len(tenures)),
		groups: &groupings{by: make(map[CostBy]Costs)}}
	// across are, per lock, the index of its tenure renewed across the
	// window's start, and inside the renewals of its tenures granted within.
	across, inside := make(map[int64]int), make(map[int64]int64)
	for i, t := range tenures {
		tw := tenureWrites{LockTenure: t}
		if !t.Observed && within(t.GrantedAt, window) {
			tw.Grants = 1
		}
		if t.End == audit.EndReleased && within(t.EndedAt, window) {
			tw.Releases = 1
		}
		switch {
		case !t.GrantedAt.Before(window.From):
			tw.Renewals = t.Renewals
			inside[t.LockID] += t.Renewals
		case t.Renewals > 0 && !t.LastRenewedAt.Before(window.From.Add(-audit.WriteLoadSkew)):
			across[t.LockID] = i // tenures come in seq order: the newest one
		}
		out.tenures[i] = tw
	}
	if len(across) == 0 {
		return out, nil
	}
	counts, err := s.RenewalCounts(ctx, slices.Collect(maps.Keys(across)), window)
	if err != nil {
		return writeTally{}, err
	}
	for id, i := range across {
		out.tenures[i].Renewals = max(0, counts[id]-inside[id])
	}
	return out, nil
}

// within reports whether t is inside window, bounds included.
func within(t time.Time, window audit.TimeFilter) bool {
	return !t.IsZero() && !t.Before(window.From) && !t.After(window.To)
}
