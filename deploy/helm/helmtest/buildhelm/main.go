// Command buildhelm builds helm into the cache if it is missing, so `make
// test` pays for the build once, before the tests.
package main

import (
	"github.com/leasewatch/leasewatch/deploy/gotool"
	"github.com/leasewatch/leasewatch/deploy/helm/helmtest"
)

func main() { gotool.Main(helmtest.Helm) }
