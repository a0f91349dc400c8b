package redis

import (
	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is Redis as the rest of leasewatch knows it: a key's expired
// event can come late, so leases end by the clock.
var Backend = collectors.Backend{Kind: audit.KindRedis, ExpiresByClock: true}
