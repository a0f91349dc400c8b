package pgtest

import (
	"context"
	"errors"
	"os"
	"sync"
)

// Shared is one server for a whole test binary, started by the first test
// that asks for it; each test gets a database of its own from it. TestMain
// stops it after the tests:
//
//	var pg pgtest.Shared
//
//	func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }
//
//	func TestSomething(t *testing.T) {
//		url := pg.Get(t).Database(t)
//		...
//	}
//
// Tests that Kill, Restart or stop a server start one of their own with
// Start: the shared one must stay up for the others.
type Shared struct {
	// Options are those the server starts with.
	Options Options

	once sync.Once
	srv  *Server
	err  error
}

// TB is the part of testing.TB that Shared.Get and Server.Database use.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Get returns the shared server, starting it on the first call. When
// PostgreSQL is not installed the test is skipped, with how to install it,
// except under CI=true, where that is a failure. A server that is installed
// but does not start fails the test.
func (s *Shared) Get(t TB) *Server {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*readyBudget)
		defer cancel()
		s.srv, s.err = Start(ctx, s.Options)
	})
	if s.err != nil {
		unavailable(t, s.err)
		return nil
	}
	return s.srv
}

// New starts a server of the test's own, for tests that Kill, Restart or
// stop it, and stops it and removes its directory when the test ends. It
// skips or fails as Shared.Get does.
func New(t TB, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*readyBudget)
	defer cancel()
	srv, err := Start(ctx, opts)
	if err != nil {
		unavailable(t, err)
		return nil
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	return srv
}

// unavailable skips or fails a test whose server did not start.
func unavailable(t TB, err error) {
	t.Helper()
	switch {
	case errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("%v", err)
	case errors.Is(err, ErrNotInstalled):
		t.Fatalf("CI=true, so a missing PostgreSQL is a failure: %v", err)
	default:
		t.Fatalf("PostgreSQL did not start: %v", err)
	}
}

// M is what Run needs of *testing.M (this package does not import testing,
// so that a program can use Start too).
type M interface{ Run() int }

// Run runs the tests and then stops the shared server, if one started, and
// returns the exit code for os.Exit.
func (s *Shared) Run(m M) int {
	code := m.Run()
	if s.srv != nil {
		if err := s.srv.Stop(); err != nil {
			os.Stderr.WriteString("pgtest: " + err.Error() + "\n")
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}
