// Package promtooltest provides promtool, Prometheus's rule checker and rule
// unit-test runner, for the tests of deploy/prometheus. It is built from the
// Prometheus Go module at a pinned version and cached in .cache/ at the
// repository root, so the build (about 8 minutes cold on 2 cores) is paid
// once; `make deps` pays it before the tests.
package promtooltest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/deploy/gotool"
)

// Version is the Prometheus module version promtool is built from.
const Version = "v0.316.0"

const pkg = "github.com/prometheus/prometheus/cmd/promtool"

// Binary returns the path of the cached promtool, building it first (about
// 8 minutes on a cold cache) when the cache has none. Progress of a build is
// written to log.
func Binary(ctx context.Context, log io.Writer) (string, error) {
	return gotool.Install(ctx, pkg, Version, log)
}

// buildBudget bounds a cold build of promtool (about 8 minutes).
const buildBudget = 20 * time.Minute

// Require returns promtool for a test, building it on the first call of
// the process: see gotool.Require.
func Require(t testing.TB) string {
	t.Helper()
	return gotool.Require(t, pkg, Version, buildBudget)
}
