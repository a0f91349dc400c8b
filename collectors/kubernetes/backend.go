package kubernetes

import (
	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is Kubernetes as the rest of leasewatch knows it: a Lease never
// says it expired, so leases end by the clock.
var Backend = collectors.Backend{Kind: audit.KindKubernetes, ExpiresByClock: true}
