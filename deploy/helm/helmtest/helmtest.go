// Package helmtest provides Helm's CLI for the chart's tests: helm.sh/helm/v3's
// cmd/helm, built from its Go module at a pinned version and cached in .cache/
// at the repository root, as promtool is (deploy/gotool).
package helmtest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/deploy/gotool"
)

// Version is the Helm module version the tests run.
const Version = "v3.21.4"

const pkg = "helm.sh/helm/v3/cmd/helm"

// buildBudget bounds a cold build (a minute or two on 2 cores).
const buildBudget = 15 * time.Minute

// Binary returns the path of the cached helm, building it first when the
// cache has none. Progress of a build is written to log.
func Binary(ctx context.Context, log io.Writer) (string, error) {
	return gotool.Install(ctx, pkg, Version, log)
}

// Require returns helm for a test: see gotool.Require.
func Require(t testing.TB) string {
	t.Helper()
	return gotool.Require(t, pkg, Version, buildBudget)
}
