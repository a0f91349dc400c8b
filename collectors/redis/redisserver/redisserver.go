// Package redisserver runs Debian's redis-server on a free loopback port,
// without persistence: the Redis backend of `leasewatch demo` and of the
// Redis load run.
package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ErrNotInstalled means redis-server is not on PATH.
var ErrNotInstalled = errors.New("redis-server is not on PATH: install Debian's redis-server")

// Server is a running redis-server.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs redis-server with its files in dir and extra command-line
// arguments (e.g. "--maxclients", "20000"), and waits until it answers.
func Start(ctx context.Context, dir string, extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, done: make(chan struct{})}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	s.cmd = exec.Command(bin, args...)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() {
		s.cmd.Wait()
		close(s.done)
	}()
	cli := goredis.NewClient(&goredis.Options{Addr: s.Addr})
	defer cli.Close()
	deadline := time.Now().Add(10 * time.Second)
	for cli.Ping(ctx).Err() != nil {
		select {
		case <-s.done:
			return nil, errors.New("redis-server exited at start: see " + filepath.Join(dir, "redis.log"))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("redis-server did not answer within 10s")
		}
	}
	return s, nil
}

// Pid is the server's process ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop stops the server.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
