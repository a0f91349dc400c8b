// Package testproc holds what every harness that runs a real server for the
// tests needs (kube-apiserver, PostgreSQL, Alertmanager, the load tool's
// servers): a free loopback port to give it, and the end of its log for a
// failure message. Standard library only.
package testproc

import (
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// server started on it may still lose a race for it; harnesses retry.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TailFile returns the last n lines of the file at path, or why it could not
// be read.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return Tail(string(b), n)
}

// Terminate sends p SIGTERM and waits until done is closed (the process has
// exited), killing it if that takes longer than grace.
func Terminate(p *os.Process, done <-chan struct{}, grace time.Duration) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Kill()
		<-done
	}
}
