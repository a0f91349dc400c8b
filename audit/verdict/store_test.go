package verdict_test

import (
	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// Both stores, and what the web server reads through, serve a Keeper.
var (
	_ verdict.KeeperStore = (*sqlite.Store)(nil)
	_ verdict.KeeperStore = (*postgres.Store)(nil)
	_ verdict.KeeperStore = audit.Reads(nil)
)
