// Package gotool builds the command-line tools the tests run (promtool,
// alertmanager) from their Go modules with `go install`, and caches each in
// .cache/<name>-<version>/ at the repository root, so `make test` pays for a
// cold build once.
package gotool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
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

// Tool is a command the tests run, built from its Go module: Pkg, the main
// package, at Version, within Budget when a test builds it.
type Tool struct {
	Pkg, Version string
	Budget       time.Duration
}

// Binary returns the path of the cached binary, building it first when the
// cache has none. Progress of a build is written to log.
func (tl Tool) Binary(ctx context.Context, log io.Writer) (string, error) {
	return Install(ctx, tl.Pkg, tl.Version, log)
}

// built holds each tool a test process asked Require for, built at most
// once: pkg@version -> its build.
var built sync.Map

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Require returns the tool's binary for a test, installing it (within
// Budget) on the process's first call for it. One that cannot be had fails
// the test under CI=true and skips it elsewhere, as does -short outside CI
// (no build of minutes then).
func (tl Tool) Require(t testing.TB) string {
	t.Helper()
	pkg, version, budget := tl.Pkg, tl.Version, tl.Budget
	ci := os.Getenv("CI") == "true"
	v, _ := built.LoadOrStore(pkg+"@"+version, &build{})
	b := v.(*build)
	b.once.Do(func() {
		if testing.Short() && !ci {
			b.err = errors.New("not built under -short")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		var log bytes.Buffer
		if b.bin, b.err = Install(ctx, pkg, version, &log); b.err != nil {
			b.err = errors.Join(b.err, errors.New(log.String()))
		}
	})
	if b.err != nil {
		if ci {
			t.Fatalf("%s unavailable (CI=true, so this is a failure): %v", path.Base(pkg), b.err)
		}
		t.Skipf("%s unavailable: %v", path.Base(pkg), b.err)
	}
	return b.bin
}

// Main is the main of a command that builds tool ahead of the tests (make
// deps): it prints the binary's path, or the error and exits 1.
func Main(tool Tool) {
	bin, err := tool.Binary(context.Background(), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
