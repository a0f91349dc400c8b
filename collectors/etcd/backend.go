package etcd

import (
	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is etcd as the rest of leasewatch knows it: the collector reads
// every expiry from the watch (a lease's revocation deletes its keys).
var Backend = collectors.Backend{Kind: audit.KindEtcd}
