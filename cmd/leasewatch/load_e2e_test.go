package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// lockClients are etcd lock clients (concurrency.Mutex) that take their lock,
// hold it a few milliseconds and release it, over and over, and log every
// acquisition's token (the owner key's CreateRevision) and release. A client
// is never cancelled while it waits, so every key it creates becomes a grant
// it logs.
type lockClients struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	acquired map[string][]int64 // per lock, in order
	released map[string][]int64
	err      error // the first client failure
}

// startLockClients runs perLock clients on each lock until finish.
func startLockClients(cli *clientv3.Client, locks []string, perLock int) *lockClients {
	c := &lockClients{stop: make(chan struct{}), acquired: make(map[string][]int64), released: make(map[string][]int64)}
	for _, lock := range locks {
		for range perLock {
			c.wg.Go(func() {
				if err := c.client(cli, lock); err != nil {
					c.mu.Lock()
					c.err = errors.Join(c.err, fmt.Errorf("lock client on %s: %w", lock, err))
					c.mu.Unlock()
				}
			})
		}
	}
	return c
}

func (c *lockClients) client(cli *clientv3.Client, lock string) error {
	ctx := context.Background()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		select {
		case <-c.stop:
			return nil
		default:
		}
		m := concurrency.NewMutex(s, lock)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		resp, err := cli.Get(ctx, m.Key())
		if err != nil || len(resp.Kvs) == 0 {
			return fmt.Errorf("read own key %s: %v", m.Key(), err)
		}
		token := resp.Kvs[0].CreateRevision
		c.mu.Lock()
		c.acquired[lock] = append(c.acquired[lock], token)
		c.mu.Unlock()
		time.Sleep(time.Duration(rand.N(4)) * time.Millisecond) // the holder's work
		if err := m.Unlock(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		c.released[lock] = append(c.released[lock], token)
		c.mu.Unlock()
	}
}

// finish stops the clients once each has released its lock, and returns
// their log.
func (c *lockClients) finish(t *testing.T) (acquired, released map[string][]int64) {
	t.Helper()
	close(c.stop)
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Fatal(c.err)
	}
	// A release is logged after Unlock returns, by when the next client
	// may have taken the lock and released it too. Each holder released
	// before the next could acquire, so the releases happened in the
	// order of their tokens (the acquisitions are logged before the
	// holder lets go, in order).
	for _, ts := range c.released {
		slices.Sort(ts)
	}
	return c.acquired, c.released
}

// latest returns the newest token acquired on lock, 0 before any.
func (c *lockClients) latest(lock string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.acquired[lock]; len(ts) > 0 {
		return ts[len(ts)-1]
	}
	return 0
}

// writeReport is one fenced-write report as POST /api/v1/writes takes it.
type writeReport struct {
	Source    string `json:"source"`
	Lock      string `json:"lock"`
	Resource  string `json:"resource"`
	Token     int64  `json:"token"`
	Outcome   string `json:"outcome"`
	Holder    string `json:"holder,omitempty"`
	RequestID string `json:"request_id"`
}

// postWrites sends reports and returns the answer's status and body; err is
// a transport failure, after which the reports may or may not be stored.
func postWrites(client *http.Client, base string, reports []writeReport) (int, string, error) {
	body, err := json.Marshal(reports)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/writes", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+testIngestToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(b), nil
}

// acceptedCount reads N from a {"accepted":N} answer, -1 from anything else.
func acceptedCount(body string) int {
	var a struct{ Accepted *int }
	if json.Unmarshal([]byte(body), &a) != nil || a.Accepted == nil {
		return -1
	}
	return *a.Accepted
}

// writers are protected resources reporting fenced writes as fast as they
// are answered, in batches with a request_id per report. Like a careful
// client, a writer sends a batch again, with the same request IDs, until it
// is answered 202: after a refused connection, a 503, or an answer lost to a
// crash (the batch may already be stored, and must not be stored twice).
type writers struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	acked   map[string]bool  // request IDs answered 202
	sending map[int][]string // per writer, the batch not yet answered 202
	stats   writerStats
	err     error
}

type writerStats struct {
	posts       int // requests sent or tried
	batches     int // batches answered 202
	refused     int // connection refused: leasewatch was down
	lost        int // transport failure after connecting: the answer was lost
	unavailable int // answered 503
}

// startWriters runs n writers that report batch writes at a time on locks
// of source, with the lock clients' latest tokens.
func startWriters(base, source string, locks []string, lc *lockClients, n, batch int) *writers {
	w := &writers{stop: make(chan struct{}), acked: make(map[string]bool), sending: make(map[int][]string)}
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range n {
		w.wg.Go(func() {
			if err := w.writer(client, base, source, locks, lc, i, batch); err != nil {
				w.mu.Lock()
				w.err = errors.Join(w.err, err)
				w.mu.Unlock()
			}
		})
	}
	return w
}

func (w *writers) writer(client *http.Client, base, source string, locks []string, lc *lockClients, i, batch int) error {
	for seq := 0; ; seq++ {
		select {
		case <-w.stop:
			return nil
		default:
		}
		reports := make([]writeReport, batch)
		ids := make([]string, batch)
		for k := range reports {
			lock := locks[(seq+k)%len(locks)]
			ids[k] = fmt.Sprintf("w%d-%d-%d", i, seq, k)
			reports[k] = writeReport{Source: source, Lock: lock, Resource: fmt.Sprintf("resource-%d", i),
				Token: lc.latest(lock), Outcome: "accepted", RequestID: ids[k]}
		}
		w.mu.Lock()
		w.sending[i] = ids
		w.mu.Unlock()
		for {
			status, body, err := postWrites(client, base, reports)
			w.mu.Lock()
			w.stats.posts++
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				w.stats.refused++
			case err != nil:
				w.stats.lost++
			case status == http.StatusServiceUnavailable:
				w.stats.unavailable++
			case status == http.StatusAccepted && acceptedCount(body) == batch:
				for _, id := range ids {
					w.acked[id] = true
				}
				delete(w.sending, i)
				w.stats.batches++
			default:
				w.mu.Unlock()
				return fmt.Errorf("writer %d: POST /api/v1/writes: %d %s", i, status, body)
			}
			done := w.sending[i] == nil
			w.mu.Unlock()
			if done {
				break
			}
			time.Sleep(20 * time.Millisecond) // the client's pause before it retries
		}
	}
}

// snapshot returns the request IDs answered 202 so far and the batches still
// waiting for one.
func (w *writers) snapshot() (acked map[string]bool, sending [][]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	acked = make(map[string]bool, len(w.acked))
	for id := range w.acked {
		acked[id] = true
	}
	for _, ids := range w.sending {
		sending = append(sending, ids)
	}
	return acked, sending
}

// answered returns how many batches were answered 202 so far.
func (w *writers) answered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats.batches
}

// finish stops the writers once each has had its last batch answered 202
// (leasewatch must be up), and returns every request ID answered 202.
func (w *writers) finish(t *testing.T) (map[string]bool, writerStats) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatal(w.err)
	}
	return w.acked, w.stats
}
