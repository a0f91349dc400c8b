// Package helmtest provides Helm's CLI for the chart's tests: helm.sh/helm/v3's
// cmd/helm, built from its Go module at a pinned version and cached in .cache/
// at the repository root, as promtool is (deploy/gotool).
package helmtest

import (
	"time"

	"github.com/leasewatch/leasewatch/deploy/gotool"
)

// Helm is the helm the tests run (a minute or two to build cold on 2 cores).
var Helm = gotool.Tool{Pkg: "helm.sh/helm/v3/cmd/helm", Version: "v3.21.4", Budget: 15 * time.Minute}
