// Command buildpromtool builds promtool into the cache if it is missing, so
// `make test` pays for the build once, before the tests.
package main

import (
	"github.com/leasewatch/leasewatch/deploy/gotool"
	"github.com/leasewatch/leasewatch/deploy/prometheus/promtooltest"
)

func main() { gotool.Main(promtooltest.Promtool) }
