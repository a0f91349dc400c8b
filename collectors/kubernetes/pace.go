package kubernetes

import (
	"context"
	"net"
	"time"
)

// At a cluster's steady trickle of heartbeats, the apiserver writes each
// watch event as it happens: one TLS record and one HTTP/2 frame, so reading
// them one by one costs a wake-up of the connection's reader, a read system
// call and a decryption per event, more than leasewatch spends on the event
// itself. A paced connection reads at most once per interval while reads
// come back short (the socket had no more), so each read takes in all that
// arrived meanwhile. The watch's events wait for the batch window anyway
// (WithBatchWindow), so pacing at half of it adds little lag. A read that
// fills its buffer, as a list's pages do, is followed at once by the next.

// pacedDialer returns a dial function whose connections are paced to one
// short read per every; dial is the one to wrap, nil for net.Dialer's with
// client-go's timeouts.
func pacedDialer(dial func(ctx context.Context, network, address string) (net.Conn, error), every time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &pacedConn{Conn: conn, every: every}, nil
	}
}

// pacedConn is a connection whose reads are paced (see pacedDialer). Like
// any net.Conn it is read by one goroutine at a time.
type pacedConn struct {
	net.Conn
	every time.Duration
	short bool      // the last read returned less than it could take
	last  time.Time // when the last read returned
}

func (c *pacedConn) Read(p []byte) (int, error) {
	if c.short {
		if wait := c.every - time.Since(c.last); wait > 0 {
			time.Sleep(wait)
		}
	}
	n, err := c.Conn.Read(p)
	c.short, c.last = n < len(p), time.Now()
	return n, err
}
