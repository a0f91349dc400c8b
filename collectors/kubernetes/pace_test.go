package kubernetes

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// pacedPair returns a paced connection and the peer that writes to it.
func pacedPair(t *testing.T, every time.Duration) (paced net.Conn, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	paced, err = pacedDialer(nil, every)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { paced.Close(); peer.Close() })
	return paced, peer
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

func TestPacedConnReadsWhatArrivedMeanwhile(t *testing.T) {
	const every = 200 * time.Millisecond
	paced, peer := pacedPair(t, every)
	buf := make([]byte, 64)

	write(t, peer, "a")
	n, err := paced.Read(buf)
	if err != nil || string(buf[:n]) != "a" {
		t.Fatalf("first read = %q, %v; want a", buf[:n], err)
	}
	start := time.Now()
	write(t, peer, "b")
	write(t, peer, "c")
	n, err = paced.Read(buf)
	if err != nil || string(buf[:n]) != "bc" {
		t.Fatalf("read after a short read = %q, %v; want both writes made meanwhile, bc", buf[:n], err)
	}
	if waited := time.Since(start); waited < every*3/4 {
		t.Fatalf("read after a short read returned after %s, want about %s", waited, every)
	}
}

func TestPacedConnFullReadsAreNotPaced(t *testing.T) {
	const every = 5 * time.Second
	paced, peer := pacedPair(t, every)
	write(t, peer, "abcdef")
	buf := make([]byte, 3)
	start := time.Now()
	for _, want := range []string{"abc", "def"} {
		if _, err := io.ReadFull(paced, buf); err != nil || string(buf) != want {
			t.Fatalf("read = %q, %v; want %s", buf, err, want)
		}
	}
	if took := time.Since(start); took >= every {
		t.Fatalf("reads that filled their buffer took %s: paced like short ones", took)
	}
}

// The batch window stretches while events come too slowly to fill it, up
// to twice the configured one, and goes back as they speed up.
func TestBatchWindowStretches(t *testing.T) {
	r := &run{c: &Collector{batchWindow: 100 * time.Millisecond}}
	batch := func(n int, since time.Duration) {
		r.stretch(n, since)
		r.applied = time.Unix(1, 0)
	}
	batch(1, 0) // the first: the configured window
	if r.window != 100*time.Millisecond {
		t.Fatalf("first window %v, want the configured 100ms", r.window)
	}
	for range 20 { // 225 events a second
		batch(22, 100*time.Millisecond)
	}
	if r.window != 200*time.Millisecond {
		t.Fatalf("at 220 events/s the window is %v, want stretched to 200ms", r.window)
	}
	for range 20 { // 500 a second: 50 fill the configured window
		batch(100, 200*time.Millisecond)
	}
	if r.window < 100*time.Millisecond || r.window > 101*time.Millisecond {
		t.Fatalf("at 500 events/s the window is %v, want back to 100ms", r.window)
	}
	batch(350, 100*time.Millisecond) // one burst does not swing it past the configured
	if r.window != 100*time.Millisecond {
		t.Fatalf("after a burst the window is %v, want 100ms", r.window)
	}

	off := &run{c: &Collector{}}
	off.stretch(1, time.Second)
	off.applied = time.Unix(1, 0)
	off.stretch(1, time.Second)
	if off.window != 0 {
		t.Fatalf("with no batch window, stretched to %v", off.window)
	}
}

// A batch window of a 130,000-node cluster's heartbeats (13,000 a second,
// 1,300 in 100 ms) waits in the watches' channel and is recorded as one
// input. The channel and the batch held 256, which capped the collector at
// 2,560 events a second however fast the rest was.
func TestBatchWindowHoldsALargeClustersHeartbeats(t *testing.T) {
	const n = 1300
	r := &run{c: &Collector{batchWindow: 100 * time.Millisecond}, applied: time.Now()}
	r.window = r.c.batchWindow
	ws := newWatches(r, context.Background())
	for i := range n {
		select {
		case ws.msgs <- message{scope: "kube-node-lease", ev: watch.Event{Type: watch.Modified}}:
		default:
			t.Fatalf("the watches' channel holds %d events, want %d", i, n)
		}
	}
	batch, err := r.gather(context.Background(), ws, []message{<-ws.msgs})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != n {
		t.Fatalf("batch of %d events, want the window's %d", len(batch), n)
	}
}
