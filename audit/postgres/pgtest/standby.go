package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a streaming standby of primary, as an operator does:
// pg_basebackup of the running primary over a replication connection, with
// -R so that the copy follows the primary (standby.signal and
// primary_conninfo), started on a free port of 127.0.0.1 of its own with
// opts' settings. It returns once the standby accepts connections (read
// only, as hot_standby is on by default) and streams from the primary.
func StartStandby(ctx context.Context, primary *Server, opts Options) (*Server, error) {
	s := &Server{bin: primary.bin, cred: primary.cred, password: primary.password}
	var err error
	if s.dir, err = os.MkdirTemp("", "leasewatch-pgtest-"); err != nil {
		return nil, err
	}
	if err := s.baseBackup(ctx, primary, opts); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.waitStreaming(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// NewStandby is StartStandby for a test: the standby is stopped and its
// directory removed when the test ends. It skips or fails as New does.
func NewStandby(t TB, primary *Server, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*readyBudget)
	defer cancel()
	srv, err := StartStandby(ctx, primary, opts)
	if err != nil {
		unavailable(t, err)
		return nil
	}
	t.Cleanup(func() {
		// Either may be the primary by now: with the standby gone, its
		// commits (a database dropped after the test) would wait forever.
		for _, s := range []*Server{primary, srv} {
			if s.Pid() != 0 {
				_ = s.exec(context.Background(), `ALTER SYSTEM RESET synchronous_standby_names`, `SELECT pg_reload_conf()`)
			}
		}
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the PostgreSQL standby: %v", err)
		}
	})
	return srv
}

// Follow makes s, a server that is down (killed, or stopped), a standby of
// primary on its own port, as an operator brings a failed primary back after
// a failover: its data directory is replaced by a base backup of primary's.
// It returns once s streams from primary.
func (s *Server) Follow(ctx context.Context, primary *Server) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return fmt.Errorf("follow %s: %s is running", primary.Addr, s.Addr)
	}
	if err := os.RemoveAll(s.DataDir); err != nil {
		return err
	}
	if err := s.copyOf(ctx, primary); err != nil {
		return err
	}
	if err := s.start(ctx); err != nil {
		return err
	}
	return s.waitStreaming(ctx)
}

// baseBackup copies primary's data directory into s's and starts s on it.
func (s *Server) baseBackup(ctx context.Context, primary *Server, opts Options) error {
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("give %s to the postgres user: %w", s.dir, err)
		}
	}
	s.DataDir = filepath.Join(s.dir, "data")
	s.LogFile = filepath.Join(s.dir, "postgres.log")
	if err := s.copyOf(ctx, primary); err != nil {
		return err
	}
	return s.listen(ctx, opts)
}

// copyOf makes s.DataDir a base backup of primary's that follows it.
func (s *Server) copyOf(ctx context.Context, primary *Server) error {
	// --checkpoint=fast: the copy starts at once rather than at the next
	// scheduled checkpoint. --no-sync as initdb's: no test crashes the
	// machine.
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "pg_basebackup"), "-D", s.DataDir,
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", superuser,
		"-X", "stream", "-R", "--checkpoint=fast", "--no-sync")
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "PGPASSWORD="+s.password)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup of %s: %w\n%s", primary.Addr, err, out)
	}
	return nil
}

// waitStreaming polls until s, a standby, receives its primary's WAL.
func (s *Server) waitStreaming(ctx context.Context) error {
	return s.poll(ctx, "the standby to stream from its primary",
		`SELECT count(*) > 0 FROM pg_stat_wal_receiver WHERE status = 'streaming'`)
}

// RequireSynchronousStandby makes every commit on s, a primary, wait until
// a standby has flushed it (synchronous_standby_names = '*', with
// synchronous_commit's default, on), and returns once a standby is
// synchronous. From then on no commit completes while no standby streams.
func (s *Server) RequireSynchronousStandby(ctx context.Context) error {
	if err := s.exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '*'`, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("require a synchronous standby: %w", err)
	}
	return s.poll(ctx, "a synchronous standby",
		`SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = 'sync'`)
}

// Promote ends a standby's recovery, as an operator's failover does, and
// returns once it takes writes.
func (s *Server) Promote(ctx context.Context) error {
	if err := s.exec(ctx, `SELECT pg_promote(true, 60)`); err != nil {
		return fmt.Errorf("promote the standby: %w", err)
	}
	return s.poll(ctx, "the promoted standby to take writes", `SELECT NOT pg_is_in_recovery()`)
}

// FailoverURL is databaseURL, a database's URL on a primary (Database's),
// with the hosts of the primary's standbys added: libpq's (and pgx's)
// multi-host form, with target_session_attrs=primary, which connects to
// whichever of them is the primary (not in recovery).
func FailoverURL(databaseURL string, standbys ...*Server) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", err
	}
	hosts := []string{u.Host}
	for _, s := range standbys {
		hosts = append(hosts, s.Addr)
	}
	u.Host = strings.Join(hosts, ",")
	q := u.Query()
	q.Set("target_session_attrs", "primary")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// exec runs statements on s's postgres database, one connection.
func (s *Server) exec(ctx context.Context, statements ...string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range statements {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// poll runs query, which returns one boolean, until it is true or
// readyBudget has passed.
func (s *Server) poll(ctx context.Context, what, query string) error {
	ctx, cancel := context.WithTimeout(ctx, readyBudget)
	defer cancel()
	var last error
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			var ok bool
			err = conn.QueryRow(ctx, query).Scan(&ok)
			conn.Close(context.Background())
			if err == nil && ok {
				return nil
			}
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s on %s: %w (last error: %v)", what, s.Addr, ctx.Err(), last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}
