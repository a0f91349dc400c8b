// Package backends is the list of the backends leasewatch speaks. A new
// backend is a package under collectors that declares a collectors.Backend,
// and one line here.
package backends

import (
	"cmp"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/postgres"
	"github.com/leasewatch/leasewatch/collectors/redis"
	"github.com/leasewatch/leasewatch/collectors/zookeeper"
)

var all = []collectors.Backend{
	etcd.Backend,
	kubernetes.Backend,
	postgres.Backend,
	redis.Backend,
	zookeeper.Backend,
}

// All returns every backend, in the order of their kinds.
func All() []collectors.Backend {
	out := slices.Clone(all)
	slices.SortFunc(out, func(a, b collectors.Backend) int { return cmp.Compare(a.Kind, b.Kind) })
	return out
}

// Kinds returns every backend's kind, sorted.
func Kinds() []audit.SourceKind {
	var out []audit.SourceKind
	for _, b := range All() {
		out = append(out, b.Kind)
	}
	return out
}

// Of returns the backend of kind, if leasewatch speaks it.
func Of(kind audit.SourceKind) (collectors.Backend, bool) {
	i := slices.IndexFunc(all, func(b collectors.Backend) bool { return b.Kind == kind })
	if i < 0 {
		return collectors.Backend{}, false
	}
	return all[i], true
}
