// Package pgtest runs a real PostgreSQL server, Debian's `postgresql`
// package, for the tests of the Postgres store: initdb into a temporary
// directory, a postgres process listening only on 127.0.0.1 on a free port,
// a fresh database per test, and Kill and Restart for the crash and outage
// tests.
//
// PostgreSQL refuses to run as root, so when the test process is root the
// server's directory belongs to the postgres user and initdb and postgres
// run as that user (set in the child's credentials; no su or runuser is
// needed). Otherwise they run as the current user.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres): " +
	"run `make deps`, or `apt-get install postgresql` on Debian")

const (
	// superuser is the role initdb creates; tests connect as it.
	superuser = "postgres"
	// readyBudget bounds a start or restart, crash recovery included, on a
	// loaded 2-core machine.
	readyBudget = 60 * time.Second
	// stopBudget is how long a fast shutdown may take before the server's
	// processes are killed.
	stopBudget = 30 * time.Second
)

// Options change how a server is set up. The zero value is PostgreSQL's
// defaults, fsync included, which the durability tests rely on.
type Options struct {
	// BinDir holds initdb and postgres. Empty: the newest
	// /usr/lib/postgresql/<version>/bin, else the directory of postgres on
	// PATH.
	BinDir string
	// NoFsync turns the server's fsync off: faster, for tests that need no
	// durability. A Kill still loses nothing committed, since the kernel
	// keeps what postgres wrote; only a machine crash would.
	NoFsync bool
	// Settings are further server settings, passed as -c name=value.
	Settings map[string]string
	// Dir, if set, is the server's directory instead of a temporary one,
	// kept by Stop: a cluster already in it (from an earlier Start with the
	// same Dir) is run again with its data, so a benchmark can cache a large
	// generated database across runs. Missing, it is created.
	Dir string
}

// Server is a running PostgreSQL server with its data in a temporary
// directory of its own.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	// Port is the TCP port, kept across Restart.
	Port int
	// DataDir is the cluster's data directory, kept across Restart.
	DataDir string
	// LogFile is the server's log, appended to by every run.
	LogFile string

	dir      string
	keep     bool // Stop leaves dir: Options.Dir
	bin      string
	password string
	cred     *syscall.Credential
	args     []string

	mu   sync.Mutex
	proc *process // nil while stopped or killed
	dbs  int      // databases created, for unique names
}

// process is one run of the postmaster.
type process struct {
	pid  int
	done chan struct{} // closed once it has exited and been reaped
	err  error         // its exit status, once done is closed
}

// Start runs initdb in a new temporary directory and starts a server on a
// free port of 127.0.0.1, and returns once it accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := binDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if s.cred, err = credential(); err != nil {
		return nil, err
	}
	if opts.Dir != "" {
		s.dir, s.keep = opts.Dir, true
		err = os.MkdirAll(s.dir, 0o755)
	} else {
		s.dir, err = os.MkdirTemp("", "leasewatch-pgtest-")
	}
	if err != nil {
		return nil, err
	}
	if err := s.setUp(ctx, opts); err != nil {
		if !s.keep {
			os.RemoveAll(s.dir)
		}
		return nil, err
	}
	return s, nil
}

func (s *Server) setUp(ctx context.Context, opts Options) error {
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("give %s to the postgres user: %w", s.dir, err)
		}
	}
	s.DataDir = filepath.Join(s.dir, "data")
	s.LogFile = filepath.Join(s.dir, "postgres.log")
	// A kept cluster's superuser password is kept beside it, readable by
	// its owner only.
	pwPath := filepath.Join(s.dir, "password")
	if pw, err := os.ReadFile(pwPath); err == nil && s.keep && fileExists(filepath.Join(s.DataDir, "PG_VERSION")) {
		s.password = strings.TrimSpace(string(pw))
	} else {
		if err := os.RemoveAll(s.DataDir); err != nil {
			return err
		}
		pw := make([]byte, 16)
		rand.Read(pw)
		s.password = hex.EncodeToString(pw)
		if err := s.initdb(ctx); err != nil {
			return err
		}
		if s.keep {
			if err := os.WriteFile(pwPath, []byte(s.password+"\n"), 0o600); err != nil {
				return err
			}
		}
	}
	return s.listen(ctx, opts)
}

// listen starts the server with opts' settings on a free port of 127.0.0.1.
func (s *Server) listen(ctx context.Context, opts Options) error {
	// The socket goes into the server's own directory, so it never meets a
	// system cluster's in /var/run/postgresql.
	s.args = []string{"-D", s.DataDir, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + s.dir}
	if opts.NoFsync {
		s.args = append(s.args, "-c", "fsync=off")
	}
	names := make([]string, 0, len(opts.Settings))
	for name := range opts.Settings {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s.args = append(s.args, "-c", name+"="+opts.Settings[name])
	}
	// A free port can be taken by someone else before postgres binds it;
	// then try another.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if s.Port, err = testproc.FreePort(); err != nil {
			return err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if err = s.start(ctx); err == nil || !strings.Contains(err.Error(), "could not bind") {
			return err
		}
	}
	return err
}

func (s *Server) initdb(ctx context.Context) error {
	pwfile := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if s.cred != nil {
		if err := os.Chown(pwfile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	// Password authentication on TCP, as a production server has: the port
	// is open to every user of the machine.
	args := []string{"-D", s.DataDir, "-U", superuser, "--pwfile", pwfile, "--auth-local=scram-sha-256",
		"--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-instructions",
		// initdb's closing sync of the new cluster guards only against a
		// machine crash, which no test causes, and costs seconds on a busy
		// disk. The server's own fsync, which a Kill test relies on, stays.
		"--no-sync"}
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "initdb"), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// start runs postgres on s.Port and waits until it accepts connections.
// s.mu must be held or s not yet shared.
func (s *Server) start(ctx context.Context) error {
	log, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // postgres keeps its own descriptor
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), append(s.args, "-c", "port="+strconv.Itoa(s.Port))...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.cred,
		// A test binary that dies (a panic, -timeout) takes the server with
		// it. The signal follows the thread that started the process, so
		// that thread stays locked until the process has exited (below).
		Pdeathsig: syscall.SIGKILL,
	}
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return // the locked thread exits with the goroutine, harmlessly
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.proc = p
	if err := s.waitReady(ctx, p); err != nil {
		s.killProcess()
		return fmt.Errorf("%w\nlast lines of %s:\n%s", err, s.LogFile, testproc.TailFile(s.LogFile, 20))
	}
	return nil
}

// waitReady polls with real connections until one succeeds, the process
// exits or the budget runs out.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyBudget)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attempt, s.URL("postgres"))
		cancelAttempt()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-p.done:
			return fmt.Errorf("postgres exited at start (%v)", p.err)
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections within %s: %w", readyBudget, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// URL is the connection URL of database on the server, as the superuser.
func (s *Server) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, s.password),
		Host:     s.Addr,
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates a database with a new name starting with prefix
// (lower-cased, other characters than letters and digits replaced) and
// returns its name. A database per test keeps tests apart while they share
// one server, for the cost of copying template1.
func (s *Server) CreateDatabase(ctx context.Context, prefix string) (string, error) {
	s.mu.Lock()
	s.dbs++
	n := s.dbs
	s.mu.Unlock()
	name := databaseName(prefix, n)
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return name, nil
}

// DropDatabase drops the database, disconnecting whoever is still connected
// to it.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// Database creates a fresh database named after the test, drops it when the
// test ends, and returns its URL.
func (s *Server) Database(t TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, err := s.CreateDatabase(ctx, t.Name())
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A test that stopped or killed the server has nothing left to drop.
		if err := s.DropDatabase(ctx, name); err != nil && s.Pid() != 0 {
			t.Errorf("%v", err)
		}
	})
	return s.URL(name)
}

// Pid is the postmaster's process ID, or 0 while the server is stopped or
// killed.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid
}

// Exited reports whether the server's postmaster, once started, has exited
// by itself (PostgreSQL stops when it cannot write its log, for one).
func (s *Server) Exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL to every process of the server at once, as a crash
// would, and returns once they are gone. The data directory stays for
// Restart, which then runs PostgreSQL's crash recovery.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killProcess()
}

// Restart stops the server (a fast shutdown) if it runs and starts it again
// on the same port and data directory.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopProcess()
	return s.start(ctx)
}

// Stop stops the server and removes its directory, unless it is
// Options.Dir. The server cannot be restarted after.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopProcess()
	if s.keep {
		return nil
	}
	return os.RemoveAll(s.dir)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// stopProcess asks for a fast shutdown, which disconnects clients and
// writes a checkpoint, and kills the server if it takes longer than
// stopBudget. SIGTERM would be a smart shutdown, which waits for every
// client to disconnect: a test that left a pool open would hold it up.
// The postmaster reaps all its children before it exits.
func (s *Server) stopProcess() {
	if s.proc == nil {
		return
	}
	_ = syscall.Kill(s.proc.pid, syscall.SIGINT)
	select {
	case <-s.proc.done:
		s.proc = nil
	case <-time.After(stopBudget):
		s.killProcess()
	}
}

// killProcess kills the postmaster and all its children at once, as a crash
// would, and waits until they are gone. A process group would not reach the
// children: each calls setsid() when it starts (InitPostmasterChild). So the
// postmaster is stopped first, to fork no more and to leave the children's
// PIDs unreaped, hence theirs, until they are killed.
func (s *Server) killProcess() {
	if s.proc == nil {
		return
	}
	pm := s.proc.pid
	_ = syscall.Kill(pm, syscall.SIGSTOP)
	children := childrenOf(pm)
	for _, c := range children {
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pm, syscall.SIGKILL)
	<-s.proc.done
	// Orphaned, the children are reaped by init, not by us: poll until
	// each has exited, so a restart never finds one still attached to the
	// old shared memory or holding the port.
	deadline := time.Now().Add(stopBudget)
	for _, c := range children {
		for c.running() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	s.proc = nil
}

// child is a process known by its PID and start time, which together are
// never reused.
type child struct {
	pid   int
	start string
}

// childrenOf lists the processes whose parent is ppid, from /proc.
func childrenOf(ppid int) []child {
	var out []child
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		f, ok := procStat(path)
		if ok && f[1] == strconv.Itoa(ppid) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, child{pid: pid, start: f[19]})
		}
	}
	return out
}

// running reports whether the process still runs: it exists, is the same
// process (its start time) and has not exited (a zombie has).
func (c child) running() bool {
	f, ok := procStat(fmt.Sprintf("/proc/%d/stat", c.pid))
	return ok && f[19] == c.start && f[0] != "Z" && f[0] != "X"
}

// procStat returns the fields of a /proc/PID/stat file after the command
// name, from the state on (field 3 of proc(5) is f[0], the start time
// f[19]), or false if the process is gone.
func procStat(path string) ([]string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) >= 20
}

// binDir finds the directory with initdb and postgres.
func binDir(dir string) (string, error) {
	if dir == "" {
		dir = newestDebian("/usr/lib/postgresql")
	}
	if dir == "" {
		if path, err := exec.LookPath("postgres"); err == nil {
			dir = filepath.Dir(path)
		}
	}
	if dir == "" {
		return "", ErrNotInstalled
	}
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%w: %v", ErrNotInstalled, err)
		}
	}
	return dir, nil
}

// newestDebian returns root/<version>/bin of the highest version that has a
// postgres binary, or "".
func newestDebian(root string) string {
	paths, _ := filepath.Glob(filepath.Join(root, "*", "bin", "postgres"))
	best, bestVersion := "", -1.0
	for _, p := range paths {
		// Versions are 15, 16, ... since PostgreSQL 10, and 9.6 before.
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(filepath.Dir(p))), 64)
		if err == nil && v > bestVersion {
			best, bestVersion = filepath.Dir(p), v
		}
	}
	return best
}

// credential is who initdb and postgres run as: the postgres user when the
// test process is root, since postgres refuses root, else nil (ourselves).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to run the server as (Debian's postgresql package creates it): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres user: uid %q, gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// databaseName is prefix reduced to lower-case letters, digits and
// underscores, cut to fit PostgreSQL's 63-byte names, and numbered.
func databaseName(prefix string, n int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(prefix) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() == 48 {
			break
		}
	}
	name := b.String()
	if name == "" || name[0] >= '0' && name[0] <= '9' {
		name = "db_" + name
	}
	return name + "_" + strconv.Itoa(n)
}
