package fence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	defaultQueueSize     = 10000
	defaultBatchSize     = 500
	defaultFlushInterval = 200 * time.Millisecond
	defaultMaxRetryDelay = 30 * time.Second
	defaultHTTPTimeout   = 10 * time.Second
	firstRetryDelay      = 100 * time.Millisecond

	// maxBody is the largest request body POST /api/v1/writes takes; it
	// answers 413 above it, so batches are cut to fit.
	maxBody = 1 << 20
)

// ErrDropped is returned by Flush and Close when some of the writes they
// waited for will never reach leasewatch: it refused them, or Close gave up.
var ErrDropped = errors.New("fence: writes dropped")

// Config configures a Reporter. URL, Token, Source and Resource are required.
type Config struct {
	// URL is leasewatch's base URL, such as http://127.0.0.1:8080.
	URL string
	// Token is an ingest bearer token (ingest_tokens in leasewatch's config).
	Token string
	// Source is the name of the leasewatch source whose locks this resource
	// fences, such as prod-etcd: the source of every Write that names none.
	Source string
	// Resource names the protected resource, such as accounts-db.
	Resource string
	// Client sends the requests. Default: a client with a 10s timeout.
	Client *http.Client
	// QueueSize bounds the writes queued or in flight; Report drops writes
	// beyond it. Default 10000.
	QueueSize int
	// BatchSize is the most writes sent in one request. Default 500.
	BatchSize int
	// FlushInterval is how long a write may wait for a batch to fill.
	// Default 200ms.
	FlushInterval time.Duration
	// MaxRetryDelay caps the backoff between retries. Default 30s.
	MaxRetryDelay time.Duration
	// Logger receives retries and drops. Default: discard.
	Logger *slog.Logger
}

// Write is one outcome to report.
type Write struct {
	// Source is the leasewatch source of Lock, for a resource fenced by
	// locks of several sources. Default: Config.Source.
	Source string
	// Lock is the lock's name within the source, such as /locks/orders.
	Lock string
	// Token is the fencing token the writer presented; nil if it had none.
	Token *int64
	// Outcome is what the resource did with the write.
	Outcome Outcome
	// HighestToken is the highest token the resource had accepted, if known.
	HighestToken *int64
	// Holder identifies the writer, as the lock backend names it if possible.
	Holder string
	// At is when the resource decided, on its own clock. Default: Report's time.
	At time.Time
	// RequestID makes the report idempotent: a report with the RequestID of
	// one already stored for the same source, lock and resource is a retry,
	// stored once, and refused (409) if it reports a different write.
	// Default: 128 random bits in hex.
	RequestID string
}

// Stats counts a Reporter's writes since it was created.
type Stats struct {
	Sent    uint64 // writes leasewatch acknowledged
	Dropped uint64 // writes that will never be sent: queue full, invalid, refused, or pending when Close gave up
	Refused uint64 // of Dropped, writes in requests leasewatch refused with a status retrying cannot fix
	Retries uint64 // requests repeated after a network error, 408, 429 or 5xx
	Pending int    // writes queued or in flight
}

// Reporter sends write outcomes to leasewatch's POST /api/v1/writes from a
// background goroutine. Its methods are safe for concurrent use.
type Reporter struct {
	cfg      Config
	endpoint string
	log      *slog.Logger
	ctx      context.Context // canceled by Close to stop the sender
	cancel   context.CancelFunc
	wake     chan struct{} // capacity 1: tells the sender to look at the queue
	done     chan struct{} // closed when the sender has stopped

	mu       sync.Mutex
	queue    []queued // encoded writes not yet taken by the sender, oldest first
	reported uint64   // sequence number of the newest queued write
	pending  int      // writes queued or in flight
	settled  uint64   // every write numbered up to here is acknowledged or dropped
	urgent   uint64   // Flush wants writes up to here sent without waiting for a batch to fill
	waiters  []*flushWaiter
	closed   bool

	sent, dropped, refused, retries atomic.Uint64
	full                            atomic.Bool // the queue-full warning was logged since the last delivery
}

type queued struct {
	body   []byte
	source string
	seq    uint64
	at     time.Time // when it was queued
}

type flushWaiter struct {
	target uint64
	lost   bool
	done   chan struct{}
}

// wireWrite is one element of the POST /api/v1/writes body (contract).
type wireWrite struct {
	Source       string  `json:"source"`
	Lock         string  `json:"lock"`
	Resource     string  `json:"resource"`
	Token        *int64  `json:"token"`
	Outcome      Outcome `json:"outcome"`
	HighestToken *int64  `json:"highest_token"`
	Holder       string  `json:"holder"`
	At           string  `json:"at"`
	RequestID    string  `json:"request_id"`
}

// NewReporter validates cfg, fills in defaults and starts the sender. Call
// Close to deliver what is queued and stop it.
func NewReporter(cfg Config) (*Reporter, error) {
	endpoint, err := endpointOf("Config", cfg.URL, cfg.Token, cfg.Source, "writes")
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Resource == "":
		return nil, errors.New("fence: Config.Resource is required")
	case cfg.QueueSize < 0:
		return nil, fmt.Errorf("fence: Config.QueueSize %d is negative", cfg.QueueSize)
	case cfg.BatchSize < 0:
		return nil, fmt.Errorf("fence: Config.BatchSize %d is negative", cfg.BatchSize)
	case cfg.FlushInterval < 0:
		return nil, fmt.Errorf("fence: Config.FlushInterval %v is negative", cfg.FlushInterval)
	case cfg.MaxRetryDelay < 0:
		return nil, fmt.Errorf("fence: Config.MaxRetryDelay %v is negative", cfg.MaxRetryDelay)
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = defaultQueueSize
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = defaultBatchSize
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = defaultFlushInterval
	}
	if cfg.MaxRetryDelay == 0 {
		cfg.MaxRetryDelay = defaultMaxRetryDelay
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: defaultHTTPTimeout}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reporter{
		cfg:      cfg,
		endpoint: endpoint,
		log:      log.With("resource", cfg.Resource),
		ctx:      ctx,
		cancel:   cancel,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	go r.run()
	return r, nil
}

// Report queues w for sending and returns at once. It fills in Source
// (Config.Source), At (now) and RequestID (random) when they are empty. A write is dropped, and counted in
// Stats.Dropped, when the queue is full, when the Reporter is closed, or when
// w is invalid (no Lock, an Outcome other than Accepted and Rejected, or a
// rejected write whose Token is above its HighestToken).
// Report copies what it needs, so w's pointers may be reused afterwards.
func (r *Reporter) Report(w Write) {
	now := time.Now()
	if w.At.IsZero() {
		w.At = now
	}
	if w.RequestID == "" {
		w.RequestID = newRequestID()
	}
	if w.Source == "" {
		w.Source = r.cfg.Source
	}
	body, err := r.encode(w)
	if err != nil {
		r.dropped.Add(1)
		r.log.Error("fence: dropping invalid write", "lock", w.Lock, "request_id", w.RequestID, "err", err)
		return
	}

	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	if r.pending >= r.cfg.QueueSize {
		r.mu.Unlock()
		r.dropped.Add(1)
		if r.full.CompareAndSwap(false, true) {
			r.log.Warn("fence: report queue full; dropping writes until leasewatch catches up",
				"queue_size", r.cfg.QueueSize)
		}
		return
	}
	r.reported++
	r.pending++
	r.queue = append(r.queue, queued{body: body, source: w.Source, seq: r.reported, at: now})
	n := len(r.queue)
	r.mu.Unlock()

	// The sender rechecks the queue whenever it wakes, so it only needs waking
	// when there is a first write to time or a full batch to send.
	if n == 1 || n == r.cfg.BatchSize {
		r.poke()
	}
}

func (r *Reporter) encode(w Write) ([]byte, error) {
	if w.Lock == "" {
		return nil, errors.New("lock is required")
	}
	if !w.Outcome.Valid() {
		return nil, fmt.Errorf("outcome %q: want %q or %q", w.Outcome, Accepted, Rejected)
	}
	if w.Outcome == Rejected && w.Token != nil && w.HighestToken != nil && *w.Token > *w.HighestToken {
		// leasewatch refuses it, and with it the whole batch.
		return nil, fmt.Errorf("highest token %d is below the rejected write's token %d", *w.HighestToken, *w.Token)
	}
	body, err := json.Marshal(wireWrite{
		Source:       w.Source,
		Lock:         w.Lock,
		Resource:     r.cfg.Resource,
		Token:        w.Token,
		Outcome:      w.Outcome,
		HighestToken: w.HighestToken,
		Holder:       w.Holder,
		At:           w.At.UTC().Format(time.RFC3339Nano),
		RequestID:    w.RequestID,
	})
	if err != nil {
		return nil, err
	}
	if len(body) > maxBody-2 { // room for the array's brackets
		return nil, fmt.Errorf("encoded write is %d bytes, over the %d-byte request limit", len(body), maxBody)
	}
	return body, nil
}

func newRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return hex.EncodeToString(b[:])
}

func (r *Reporter) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Flush sends the writes Report queued before the call without waiting for
// FlushInterval, and waits until each has been acknowledged by leasewatch or
// dropped. It returns an error wrapping ErrDropped if any write still pending
// at the call was dropped, and ctx's error if ctx ends first. Drops that
// happened before the call (including the writes Report dropped because the
// queue was full) show only in Stats and the log.
func (r *Reporter) Flush(ctx context.Context) error {
	r.mu.Lock()
	target := r.reported
	if r.settled >= target {
		r.mu.Unlock()
		return nil
	}
	r.urgent = max(r.urgent, target)
	w := &flushWaiter{target: target, done: make(chan struct{})}
	r.waiters = append(r.waiters, w)
	r.mu.Unlock()
	r.poke()

	select {
	case <-w.done:
		return w.err()
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-w.done: // settled while ctx ended
		return w.err()
	default:
	}
	r.waiters = slices.DeleteFunc(r.waiters, func(o *flushWaiter) bool { return o == w })
	return fmt.Errorf("fence: flush: %d writes still pending: %w", r.pending, ctx.Err())
}

func (w *flushWaiter) err() error {
	if w.lost {
		return fmt.Errorf("%w: leasewatch refused some of them or the reporter was closed; see the log and Stats", ErrDropped)
	}
	return nil
}

// Close stops accepting writes, flushes the queue as Flush does and stops the
// sender. If ctx ends first, the writes still pending are dropped and Close
// returns ctx's error. Calling Close again waits for the first call to finish.
func (r *Reporter) Close(ctx context.Context) error {
	r.mu.Lock()
	already := r.closed
	r.closed = true
	r.mu.Unlock()
	if already {
		select {
		case <-r.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := r.Flush(ctx)
	r.cancel() // interrupts a request or backoff in progress
	<-r.done
	return err
}

// Stats returns the Reporter's counters.
func (r *Reporter) Stats() Stats {
	r.mu.Lock()
	pending := r.pending
	r.mu.Unlock()
	return Stats{
		Sent:    r.sent.Load(),
		Dropped: r.dropped.Load(),
		Refused: r.refused.Load(),
		Retries: r.retries.Load(),
		Pending: pending,
	}
}

// batch is a request body of one source's writes, how many it holds and
// the sequence number of its first, which is the oldest write unsettled.
type batch struct {
	body  []byte
	n     int
	first uint64
}

// run is the sender: one request at a time, oldest writes first.
func (r *Reporter) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b, ok := r.nextBatch(timer)
		if !ok || !r.deliver(b) {
			r.abandon()
			return
		}
	}
}

// nextBatch waits until a batch is full, its oldest write has waited
// FlushInterval, or Flush asked for it, and takes it from the queue. It
// returns false when the Reporter is stopping.
func (r *Reporter) nextBatch(timer *time.Timer) (batch, bool) {
	for {
		r.mu.Lock()
		n := len(r.queue)
		ready := n >= r.cfg.BatchSize || n > 0 && r.queue[0].seq <= r.urgent
		var wait time.Duration
		if n > 0 && !ready {
			wait = r.cfg.FlushInterval - time.Since(r.queue[0].at)
			ready = wait <= 0
		}
		if ready {
			first := r.queue[0].seq
			bodies := r.take()
			r.mu.Unlock()
			return batch{body: joinArray(bodies), n: len(bodies), first: first}, true
		}
		r.mu.Unlock()

		if n > 0 {
			timer.Reset(wait)
		}
		select {
		case <-r.wake:
		case <-timer.C:
		case <-r.ctx.Done():
			return batch{}, false
		}
		timer.Stop()
	}
}

// take removes from the queue the oldest write and the writes of its source
// queued after it, in order, as many as fit one request. With replicas,
// each source is owned by one replica, which refuses a request naming any
// other source: a request of several sources could be refused by every
// replica, one of a single source is taken by its owner. Writes of other
// sources keep their place. r.mu must be held and the queue not empty.
func (r *Reporter) take() [][]byte {
	source := r.queue[0].source
	size := 1 // '['
	var bodies [][]byte
	full := false
	rest := r.queue[:0]
	for _, q := range r.queue {
		if q.source == source && !full {
			add := len(q.body) + 1 // ',' or ']'
			if len(bodies) < r.cfg.BatchSize && size+add <= maxBody {
				size += add
				bodies = append(bodies, q.body)
				continue
			}
			// Later writes of the source wait for the next request, behind
			// this one: each source's writes are sent in the order reported.
			full = true
		}
		rest = append(rest, q)
	}
	// encode keeps every write under maxBody-2, so the first always fits.
	clear(r.queue[len(rest):]) // let the sent bodies be collected
	r.queue = rest
	return bodies
}

func joinArray(bodies [][]byte) []byte {
	size := 1
	for _, b := range bodies {
		size += len(b) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	for i, b := range bodies {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	return append(out, ']')
}

// deliver posts b until leasewatch acknowledges or refuses it, backing off
// between attempts. The body, and so every request_id, is the same on each
// attempt, which lets leasewatch discard the copies a lost response made us
// resend. It returns false when the Reporter is stopping.
func (r *Reporter) deliver(b batch) bool {
	for attempt := 1; ; attempt++ {
		status, retryAfter, msg, err := r.post(b.body)
		switch {
		case err == nil && status >= 200 && status < 300:
			r.sent.Add(uint64(b.n))
			r.full.Store(false)
			r.settle(b, false)
			return true
		case err != nil && r.ctx.Err() != nil:
			return false
		case err != nil || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
			r.retries.Add(1)
			delay := r.backoff(attempt, retryAfter)
			attrs := []any{"attempt", attempt, "writes", b.n, "retry_in", delay}
			if err != nil {
				attrs = append(attrs, "err", err)
			} else {
				attrs = append(attrs, "status", status, "error", msg)
			}
			r.log.Warn("fence: reporting writes failed; retrying", attrs...)
			if !r.sleep(delay) {
				return false
			}
		default:
			// The server says the request is wrong (bad field, bad token, wrong
			// URL); sending it again cannot help, and holding it would stall
			// every write behind it.
			r.dropped.Add(uint64(b.n))
			r.refused.Add(uint64(b.n))
			r.log.Error("fence: leasewatch refused writes; dropping them",
				"status", status, "error", msg, "writes", b.n)
			r.settle(b, true)
			return true
		}
	}
}

// post sends one request and returns the status, the Retry-After delay and
// the error message of a non-2xx response.
func (r *Reporter) post(body []byte) (status int, retryAfter time.Duration, msg string, err error) {
	return postJSON(r.ctx, r.cfg.Client, r.endpoint, r.cfg.Token, body)
}

// endpointOf checks what every client of leasewatch's ingest needs (cfg
// names the configuration in messages) and returns the URL of
// /api/v1/<path> under rawURL.
func endpointOf(cfg, rawURL, token, source, path string) (string, error) {
	if rawURL == "" {
		return "", fmt.Errorf("fence: %s.URL is required", cfg)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("fence: %s.URL: %w", cfg, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("fence: %s.URL %q: want http://host[:port] or https://host[:port]", cfg, rawURL)
	}
	switch {
	case token == "":
		return "", fmt.Errorf("fence: %s.Token is required", cfg)
	case source == "":
		return "", fmt.Errorf("fence: %s.Source is required", cfg)
	}
	return u.JoinPath("api", "v1", path).String(), nil
}

// postJSON sends one ingest request and returns the status, the
// Retry-After delay and the error message of a non-2xx response.
func postJSON(ctx context.Context, client *http.Client, endpoint, token string, body []byte) (status int, retryAfter time.Duration, msg string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	// Read the (small) body to the end so the connection can be reused.
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, 0, "", nil
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		msg = e.Error
	} else {
		msg = strings.TrimSpace(string(data[:min(len(data), 200)]))
	}
	return resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After")), msg, nil
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return time.Until(t)
	}
	return 0
}

// backoff returns the delay before retry number attempt: exponential from
// 100ms, capped at MaxRetryDelay, with half of it random so reporters that
// failed together do not retry together. A server's Retry-After is honoured
// up to the cap.
func (r *Reporter) backoff(attempt int, retryAfter time.Duration) time.Duration {
	limit := r.cfg.MaxRetryDelay
	d := min(firstRetryDelay, limit)
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	d = d/2 + mrand.N(d/2+1)
	if retryAfter > d {
		d = min(retryAfter, limit)
	}
	return d
}

func (r *Reporter) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// settle marks b's writes done and wakes the Flush calls waiting for them.
func (r *Reporter) settle(b batch, lost bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending -= b.n
	r.settleLocked(b.first, lost)
}

// settleLocked moves the settled mark up to the oldest write still queued,
// after a batch whose first write is first. The sender has one batch in
// flight, holding the oldest unsettled write, so once it is settled every
// write before the queue's oldest is. A lost batch fails the Flush calls
// waiting for any of its writes: its first is its oldest, so first <= target
// tells.
func (r *Reporter) settleLocked(first uint64, lost bool) {
	if len(r.queue) > 0 {
		r.settled = r.queue[0].seq - 1
	} else {
		r.settled = r.reported
	}
	r.waiters = slices.DeleteFunc(r.waiters, func(w *flushWaiter) bool {
		if lost && first <= w.target {
			w.lost = true
		}
		if r.settled >= w.target {
			close(w.done)
			return true
		}
		return false
	})
}

// abandon drops whatever is still queued or in flight when the sender stops.
func (r *Reporter) abandon() {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.pending
	if n == 0 {
		return
	}
	first := r.settled + 1
	r.queue = nil
	r.pending = 0
	r.dropped.Add(uint64(n))
	r.settleLocked(first, true)
	r.log.Warn("fence: reporter closed with writes unsent; dropping them", "writes", n)
}
