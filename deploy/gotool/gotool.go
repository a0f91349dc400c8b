// Package gotool builds the command-line tools the tests run (promtool,
// alertmanager) from their Go modules with `go install`, and caches each in
// .cache/<name>-<version>/ at the repository root, so `make test` pays for a
// cold build once.
package gotool

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"time"
)

// Path returns where the binary of pkg (a main package path) at version is
// cached, built or not.
func Path(pkg, version string) string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	name := path.Base(pkg)
	return filepath.Join(root, ".cache", name+"-"+version, name)
}

// Install returns Path(pkg, version), first building it with
// `go install pkg@version` when the cache has none. Progress of a build is
// written to log.
func Install(ctx context.Context, pkg, version string, log io.Writer) (string, error) {
	bin := Path(pkg, version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	name, dir := filepath.Base(bin), filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s cache: %w", name, err)
	}
	// Install into a private directory and rename, so test packages building
	// at the same time never run a half-written binary. Run from there too,
	// outside the main module, whose go.mod plays no part in the build.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("%s cache: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "building %s %s into %s (minutes on a cold cache)\n", name, version, bin)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "install", pkg+"@"+version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s %s: %w", name, version, err)
	}
	if err := os.Rename(filepath.Join(tmp, name), bin); err != nil {
		return "", fmt.Errorf("%s cache: %w", name, err)
	}
	fmt.Fprintf(log, "built %s in %s\n", name, time.Since(start).Round(time.Second))
	return bin, nil
}
