// Package promtooltest provides promtool, Prometheus's rule checker and rule
// unit-test runner, for the tests of deploy/prometheus. It is built from the
// Prometheus Go module at a pinned version and cached in .cache/ at the
// repository root, so the build (about 8 minutes cold on 2 cores) is paid
// once; `make deps` pays it before the tests.
package promtooltest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// Version is the Prometheus module version promtool is built from.
const Version = "v0.316.0"

const pkg = "github.com/prometheus/prometheus/cmd/promtool"

// cacheDir returns the directory that holds the cached binary:
// .cache/promtool-<Version> at the repository root.
func cacheDir() string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	return filepath.Join(root, ".cache", "promtool-"+Version)
}

// Path returns where the cached promtool binary is, or will be once built.
func Path() string {
	name := "promtool"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return filepath.Join(cacheDir(), name)
}

// Binary returns the path of the cached promtool, building it first with
// `go install` when the cache has none. Progress of a build is written to log.
func Binary(ctx context.Context, log io.Writer) (string, error) {
	bin := Path()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	// Install into a private directory and rename, so test packages building
	// at the same time never run a half-written binary.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("promtool cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "building promtool %s into %s (about 8 minutes on a cold cache)\n", Version, bin)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", pkg+"@"+Version)
	// Outside the main module, so its go.mod plays no part in the build.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build promtool %s: %w", Version, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("promtool cache: %w", err)
	}
	if err := os.Rename(filepath.Join(tmp, filepath.Base(bin)), bin); err != nil {
		return "", fmt.Errorf("promtool cache: %w", err)
	}
	fmt.Fprintf(log, "built promtool in %s\n", time.Since(start).Round(time.Second))
	return bin, nil
}
