package review_test

import (
	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// Both stores, and what the web server reads through, serve a review.
var (
	_ review.Store = (*sqlite.Store)(nil)
	_ review.Store = (*postgres.Store)(nil)
	_ review.Store = audit.Reads(nil)
)
