// Command buildalertmanager builds the test Alertmanager into the cache if it
// is missing, so `make test` pays for the build once, before the tests.
package main

import (
	"github.com/leasewatch/leasewatch/audit/alert/alertmanagertest"
	"github.com/leasewatch/leasewatch/deploy/gotool"
)

func main() { gotool.Main(alertmanagertest.Tool) }
