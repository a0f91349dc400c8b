package zookeeper

import (
	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is ZooKeeper as the rest of leasewatch knows it: the server
// deletes an expired session's nodes, and the collector sees the delete.
var Backend = collectors.Backend{Kind: audit.KindZooKeeper}
