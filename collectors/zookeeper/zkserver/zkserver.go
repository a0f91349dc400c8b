// Package zkserver runs a real ZooKeeper server: Debian's package (3.8),
// started with java from /usr/share/java/zookeeper.jar as a standalone
// server on a free loopback port in a temporary directory, and stopped by
// its process id. It is the ZooKeeper of `leasewatch demo` and of the
// tests; a test package shares one server (Main, in its TestMain), and its
// tests keep apart by using their own paths.
package zkserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// Jar is the server's jar as Debian's zookeeper package installs it. Its
// manifest's Class-Path names the libraries it needs in /usr/share/java.
const Jar = "/usr/share/java/zookeeper.jar"

// classPath adds to the jar a logging binding (the server logs nothing
// without one) and Netty's codecs, which the manifest leaves out and the
// Netty connection factory (secureClientPort, TLS) needs.
var classPath = strings.Join([]string{Jar, "/usr/share/java/slf4j-simple.jar", "/usr/share/java/netty-codec.jar"}, ":")

// TickTime is the server's tick: sessions may last from 2 to 20 ticks, so
// tests can expire one in well under a second.
const TickTime = 200 * time.Millisecond

// ErrMissing says the server is not installed. Under CI=true a test must
// fail on it, never skip.
var ErrMissing = errors.New("ZooKeeper is not installed: install Debian's zookeeper package (make install-zookeeper)")

// Server is one running standalone server.
type Server struct {
	Dir  string // the temporary directory: zoo.cfg, data/, zk.log
	Addr string // 127.0.0.1:PORT, the client port

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start writes zoo.cfg (tickTime 200 ms, every four-letter word allowed,
// no admin server, and the extra lines given) into a new temporary
// directory and starts the server on a free loopback port, waiting until it
// answers srvr as standalone.
func Start(extra ...string) (*Server, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, ErrMissing
	}
	if _, err := os.Stat(Jar); err != nil {
		return nil, ErrMissing
	}
	dir, err := os.MkdirTemp("", "lwzk")
	if err != nil {
		return nil, err
	}
	port, err := testproc.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	cfg := strings.Join([]string{
		"tickTime=" + strconv.Itoa(int(TickTime/time.Millisecond)),
		"dataDir=" + filepath.Join(dir, "data"),
		"clientPort=" + strconv.Itoa(port),
		"clientPortAddress=127.0.0.1",
		"admin.enableServer=false",
		"4lw.commands.whitelist=*",
	}, "\n") + "\n" + strings.Join(extra, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if err := s.start(java); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(java string) error {
	log, err := os.OpenFile(filepath.Join(s.Dir, "zk.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(java, "-Xmx256m", "-cp", classPath,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.Dir, "zoo.cfg"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start zookeeper: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("zookeeper exited at start:\n%s", s.Log(30))
		default:
		}
		if out, err := FourLetterWord(s.Addr, "srvr"); err == nil && strings.Contains(out, "Mode: standalone") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zookeeper not answering on %s after 30s:\n%s", s.Addr, s.Log(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop terminates the server and waits for it to exit; the data stays.
// Safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	testproc.Terminate(cmd.Process, done, 15*time.Second)
}

// Restart stops the server and starts it again on the same port and data:
// sessions and nodes survive, as they do a real restart.
func (s *Server) Restart() error {
	s.Stop()
	return s.Relaunch()
}

// Relaunch starts the stopped server again on its port and data.
func (s *Server) Relaunch() error {
	java, err := exec.LookPath("java")
	if err != nil {
		return err
	}
	return s.start(java)
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

// Log returns the last n lines of the server's log.
func (s *Server) Log(n int) string { return testproc.TailFile(filepath.Join(s.Dir, "zk.log"), n) }

// FourLetterWord sends cmd (srvr, cons, dump, ...) to the server at addr and
// returns its answer.
func FourLetterWord(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String(), nil
}

// Main runs a test package's tests against one shared server, which it
// passes to use before they run and stops after. Without ZooKeeper
// installed use gets nil and the tests skip (Need), except under CI=true,
// where the package fails.
func Main(m interface{ Run() int }, use func(*Server)) int {
	s, err := Start()
	switch {
	case errors.Is(err, ErrMissing) && os.Getenv("CI") != "true":
		fmt.Fprintln(os.Stderr, err)
		use(nil)
		return m.Run()
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	use(s)
	return m.Run()
}
