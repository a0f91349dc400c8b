package kubetest

import (
	"context"
	"fmt"
	"io"
	"os/exec"
)

// StartPeer runs a second kube-apiserver on a's etcd, as in a highly
// available control plane, with its state in dir, and waits until it is
// ready; it authorizes as a does. Fault tests stop, restart and freeze a peer while clients keep
// writing through a. A peer shares a's etcd: end it with StopProcess, since
// Stop would close that etcd too.
func (a *Apiserver) StartPeer(ctx context.Context, dir string, log io.Writer) (*Apiserver, error) {
	bin, err := Binary(ctx, log)
	if err != nil {
		return nil, err
	}
	return startApiserver(ctx, bin, dir, a.Etcd, log, a.opts)
}

// Pid is the apiserver's process id, for a test to freeze it (SIGSTOP).
func (a *Apiserver) Pid() int { return a.cmd.Process.Pid }

// StopProcess stops the apiserver process and leaves its etcd running. Call
// it once per start.
func (a *Apiserver) StopProcess() { a.stopProcess() }

// Restart starts a stopped apiserver again with the same flags (its port,
// certificates and etcd) and waits until it is ready.
func (a *Apiserver) Restart(ctx context.Context) error {
	cmd := exec.Command(a.cmd.Path, a.cmd.Args[1:]...)
	cmd.Stdout, cmd.Stderr = a.cmd.Stdout, a.cmd.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	a.cmd, a.done = cmd, done
	if err := a.waitReady(ctx); err != nil {
		a.stopProcess()
		return fmt.Errorf("restarted kube-apiserver: %w", err)
	}
	return nil
}
