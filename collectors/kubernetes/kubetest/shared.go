package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// startBudget bounds a shared apiserver's start, a cold build included.
const startBudget = 20 * time.Minute

// Shared is one apiserver for a whole test binary, started by the first test
// that asks for it, so the package's other tests never wait for it. TestMain
// stops it after the tests:
//
//	var cluster kubetest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		cluster.Stop()
//		os.Exit(code)
//	}
type Shared struct {
	once sync.Once
	dir  string
	api  *Apiserver
	err  error
}

// TB is the part of testing.TB that Get uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Get returns the shared apiserver, starting it on the first call. One that
// failed to build or start fails the test under CI=true and skips it
// elsewhere, with the end of the apiserver's log.
func (s *Shared) Get(t TB) *Apiserver {
	t.Helper()
	s.once.Do(s.start)
	if s.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kube-apiserver unavailable (CI=true, so this is a failure): %v", s.err)
		}
		t.Skipf("kube-apiserver unavailable: %v", s.err)
	}
	return s.api
}

func (s *Shared) start() {
	s.dir, s.err = os.MkdirTemp("", "leasewatch-kubetest-")
	if s.err != nil {
		return
	}
	logPath := filepath.Join(s.dir, "kube-apiserver.log")
	log, err := os.Create(logPath)
	if err != nil {
		s.err = err
		return
	}
	defer log.Close() // the apiserver process keeps its own descriptor
	ctx, cancel := context.WithTimeout(context.Background(), startBudget)
	defer cancel()
	if s.api, s.err = Start(ctx, filepath.Join(s.dir, "apiserver"), log); s.err != nil {
		s.err = fmt.Errorf("%w\nlast lines of the kube-apiserver log:\n%s", s.err, testproc.TailFile(logPath, 40))
	}
}

// Stop stops the apiserver, if a test started it, and removes its files.
func (s *Shared) Stop() {
	if s.api != nil {
		s.api.Stop()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
