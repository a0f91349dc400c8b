// Package backends is the list of the backends leasewatch speaks. A new
// backend is a package under collectors that declares a collectors.Backend,
// and one line here.
package backends

import (
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/etcd"
	"github.com/leasewatch/leasewatch/collectors/kubernetes"
	"github.com/leasewatch/leasewatch/collectors/redis"
	"github.com/leasewatch/leasewatch/collectors/zookeeper"
)

var all = []collectors.Backend{
	etcd.Backend,
	kubernetes.Backend,
	redis.Backend,
	zookeeper.Backend,
}

// All returns every backend, in the order of their kinds.
func All() []collectors.Backend {
	out := slices.Clone(all)
	slices.SortFunc(out, func(a, b collectors.Backend) int { return cmpKind(a.Kind, b.Kind) })
	return out
}

func cmpKind(a, b audit.SourceKind) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Of returns the backend of kind, if leasewatch speaks it.
func Of(kind audit.SourceKind) (collectors.Backend, bool) {
	i := slices.IndexFunc(all, func(b collectors.Backend) bool { return b.Kind == kind })
	if i < 0 {
		return collectors.Backend{}, false
	}
	return all[i], true
}
