// Package promtooltest provides promtool, Prometheus's rule checker and rule
// unit-test runner, for the tests of deploy/prometheus. It is built from the
// Prometheus Go module at a pinned version and cached in .cache/ at the
// repository root, so the build (about 8 minutes cold on 2 cores) is paid
// once; `make deps` pays it before the tests.
package promtooltest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
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

// shared is the promtool of a test process, built at most once.
var shared struct {
	once sync.Once
	bin  string
	err  error
}

// Require returns promtool for a test, building it on the first call of
// the process. One that cannot be had fails the test under CI=true and
// skips it elsewhere, as does -short outside CI (no build of minutes then).
func Require(t testing.TB) string {
	t.Helper()
	ci := os.Getenv("CI") == "true"
	shared.once.Do(func() {
		if testing.Short() && !ci {
			shared.err = errors.New("not built under -short")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), buildBudget)
		defer cancel()
		var log bytes.Buffer
		if shared.bin, shared.err = Binary(ctx, &log); shared.err != nil {
			shared.err = errors.Join(shared.err, errors.New(log.String()))
		}
	})
	if shared.err != nil {
		if ci {
			t.Fatalf("promtool unavailable (CI=true, so this is a failure): %v", shared.err)
		}
		t.Skipf("promtool unavailable: %v", shared.err)
	}
	return shared.bin
}
