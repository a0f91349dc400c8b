// Package promtooltest provides promtool, Prometheus's rule checker and rule
// unit-test runner, for the tests of deploy/prometheus. It is built from the
// Prometheus Go module at a pinned version and cached in .cache/ at the
// repository root, so the build (about 8 minutes cold on 2 cores) is paid
// once; `make deps` pays it before the tests.
package promtooltest

import (
	"time"

	"github.com/leasewatch/leasewatch/deploy/gotool"
)

// Promtool is the promtool the tests run, from the Prometheus module (about
// 8 minutes to build cold).
var Promtool = gotool.Tool{Pkg: "github.com/prometheus/prometheus/cmd/promtool", Version: "v0.316.0", Budget: 20 * time.Minute}
