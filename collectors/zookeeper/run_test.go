package zookeeper

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-zookeeper/zk"
)

// A read that failed because the connection broke is the session's loss,
// which the collector answers with a re-read once the session is back,
// whether go-zookeeper reports it as its own error or as the failed
// write's; any other failure is the collector's.
func TestLostConnection(t *testing.T) {
	pipe := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	for _, tt := range []struct {
		err  error
		lost bool
	}{
		{zk.ErrConnectionClosed, true},
		{zk.ErrSessionExpired, true},
		{fmt.Errorf("read /locks/a: %w", zk.ErrNoServer), true},
		{fmt.Errorf("read /locks/a: %w", pipe), true},
		{io.EOF, true},
		{syscall.ECONNRESET, true},
		{zk.ErrNoNode, false},
		{zk.ErrNoAuth, false},
		{errors.New("record zxid 0x5: store is full"), false},
	} {
		if got := lostConnection(tt.err); got != tt.lost {
			t.Errorf("lostConnection(%v) = %t, want %t", tt.err, got, tt.lost)
		}
	}
}
