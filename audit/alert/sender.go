package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// AnnotationTimeline links to the lock's timeline in the dashboard (the
// source's page for CollectorBlind). Set only when the sender knows the
// dashboard's external URL; the same link is the alert's generatorURL.
const AnnotationTimeline = "timeline_url"

// Sender defaults, for SenderConfig fields left zero.
const (
	DefaultResendEvery = time.Minute
	DefaultSendTimeout = 10 * time.Second
	DefaultQueue       = 1000
	DefaultMinBackoff  = 500 * time.Millisecond
	DefaultMaxBackoff  = 30 * time.Second
)

// EndsAfterResends is how many ResendEvery past its sending a firing alert's
// endsAt lies: Alertmanager resolves it by itself once that many re-sends
// have not come.
const EndsAfterResends = 4

// maxBatch is the most alerts one POST carries.
const maxBatch = 100

// SenderConfig configures a Sender.
type SenderConfig struct {
	// URLs are the Alertmanagers' base URLs (http://alertmanager:9093). Every
	// alert goes to each of them, as Alertmanager's clustering expects.
	URLs []string
	// ExternalURL is the dashboard's base URL as its users reach it. When
	// set, each alert links to its lock's timeline.
	ExternalURL string
	// ResendEvery is how often the caller re-sends the alerts that still
	// fire. A firing alert is sent with endsAt 4×ResendEvery after Send, as
	// Prometheus does, so Alertmanager resolves it by itself if leasewatch
	// stops re-sending (it died, or lost its network).
	ResendEvery time.Duration
	// Timeout bounds one POST.
	Timeout time.Duration
	// Queue is how many alerts may wait for each URL. When one more comes,
	// the oldest waiting is dropped.
	Queue int
	// MinBackoff and MaxBackoff bound the wait before a failed POST is
	// retried: it starts at MinBackoff and doubles up to MaxBackoff, per URL.
	MinBackoff, MaxBackoff time.Duration
	// Client sends the requests; nil: a new http.Client.
	Client *http.Client
	// Logger receives failed sends; nil: discard.
	Logger *slog.Logger
	// Now is the clock that dates firing alerts' endsAt; nil: time.Now.
	Now func() time.Time
}

// Sender delivers alerts to Alertmanager's v2 API (POST /api/v2/alerts)
// without ever making its caller wait. Each URL has its own bounded queue and
// goroutine, so one Alertmanager down delays only its own deliveries.
//
// A queue holds at most one alert per fingerprint (Alert.Fingerprint): an
// alert sent again before the previous copy left replaces it in place, so
// re-sending every firing alert each ResendEvery costs one map lookup per
// alert and per URL, and a down Alertmanager never fills its queue with
// copies. Alertmanager itself merges alerts with the same labels, so what it
// receives twice it keeps once.
//
// Send may be called before Run and from any goroutine. Alerts still queued
// when Run returns are not sent; firing ones resolve in Alertmanager at their
// endsAt.
type Sender struct {
	cfg      SenderConfig
	external *url.URL // nil: no links
	targets  []*target
	running  atomic.Bool

	sent, failed, dropped atomic.Uint64
}

// target is one Alertmanager and the alerts waiting for it.
type target struct {
	endpoint string // the base URL + api/v2/alerts
	wake     chan struct{}

	mu    sync.Mutex
	seq   uint64
	queue []*entry          // oldest first
	index map[string]*entry // by fingerprint: at most one entry each
}

type entry struct {
	seq   uint64 // changes when a newer copy replaces the alert
	fp    string
	alert postableAlert
}

// postableAlert is Alertmanager's v2 PostableAlert.
type postableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// SenderStats counts a Sender's work since it was made.
type SenderStats struct {
	// Sent counts alerts an Alertmanager accepted, once per URL.
	Sent uint64
	// Failed counts POSTs that failed: each was retried, or, when
	// Alertmanager rejected the alerts as invalid, its alerts were dropped.
	Failed uint64
	// Dropped counts alerts discarded undelivered: the oldest of a full
	// queue, or a batch Alertmanager rejected (retrying could not help).
	Dropped uint64
	// Queued is how many alerts wait now, summed over the URLs.
	Queued int
}

// NewSender checks cfg and returns a sender with empty queues. Nothing is
// sent until Run.
func NewSender(cfg SenderConfig) (*Sender, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("alert sender: no Alertmanager URL")
	}
	if cfg.ResendEvery <= 0 {
		cfg.ResendEvery = DefaultResendEvery
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultSendTimeout
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sender{cfg: cfg}
	for i, raw := range cfg.URLs {
		u, err := ParseHTTPURL(raw)
		if err != nil {
			return nil, fmt.Errorf("alert sender: urls[%d]: %w", i, err)
		}
		s.targets = append(s.targets, &target{
			endpoint: u.JoinPath("api", "v2", "alerts").String(),
			wake:     make(chan struct{}, 1),
			index:    make(map[string]*entry),
		})
	}
	if cfg.ExternalURL != "" {
		u, err := ParseHTTPURL(cfg.ExternalURL)
		if err != nil {
			return nil, fmt.Errorf("alert sender: external URL: %w", err)
		}
		s.external = u
	}
	return s, nil
}

// ParseHTTPURL parses an absolute http or https URL with a host.
func ParseHTTPURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, err
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: scheme must be http or https", raw)
	case u.Host == "":
		return nil, fmt.Errorf("%q: no host", raw)
	}
	return u, nil
}

// Send queues alerts for every Alertmanager and returns at once. Pass what
// Evaluator.Evaluate returns: firing alerts (EndsAt zero) each time they are
// evaluated, resolved ones once. Send copies the alerts, so the caller may
// reuse them.
func (s *Sender) Send(alerts []Alert) {
	if len(alerts) == 0 {
		return
	}
	now := s.cfg.Now()
	prepared := make([]entry, len(alerts))
	for i, a := range alerts {
		prepared[i] = entry{fp: a.Fingerprint(), alert: s.postable(a, now)}
	}
	for _, t := range s.targets {
		t.add(prepared, s.cfg.Queue, &s.dropped)
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// postable converts an alert to the v2 API's form, dating a firing alert's
// end and adding the timeline link.
func (s *Sender) postable(a Alert, now time.Time) postableAlert {
	p := postableAlert{Labels: maps.Clone(a.Labels), Annotations: maps.Clone(a.Annotations), StartsAt: a.StartsAt, EndsAt: a.EndsAt}
	if a.Firing() {
		p.EndsAt = now.Add(EndsAfterResends * s.cfg.ResendEvery)
	}
	if link := s.Link(a); link != "" {
		if p.Annotations == nil {
			p.Annotations = make(map[string]string)
		}
		p.Annotations[AnnotationTimeline] = link
		p.GeneratorURL = link
	}
	return p
}

// Link returns the dashboard page of an alert's lock: the locks list filtered
// to that one lock, every class included (the alert knows the lock's source
// and name, not its id). An alert without a lock links to the sources page.
// Empty when no external URL is configured.
func (s *Sender) Link(a Alert) string {
	if s.external == nil {
		return ""
	}
	lock, ok := a.Labels[LabelLock]
	if !ok {
		return s.external.JoinPath("sources").String()
	}
	u := s.external.JoinPath("locks")
	u.RawQuery = url.Values{"source": {a.Labels[LabelSource]}, "name": {lock}, "class": {"all"}}.Encode()
	return u.String()
}

// add queues alerts, replacing queued copies in place and dropping the
// oldest beyond capacity.
func (t *target) add(alerts []entry, capacity int, dropped *atomic.Uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range alerts {
		t.seq++
		if e, ok := t.index[a.fp]; ok {
			e.seq, e.alert = t.seq, a.alert
			continue
		}
		if len(t.queue) >= capacity {
			old := t.queue[0]
			t.queue[0] = nil
			t.queue = t.queue[1:]
			delete(t.index, old.fp)
			dropped.Add(1)
		}
		e := &entry{seq: t.seq, fp: a.fp, alert: a.alert}
		t.queue = append(t.queue, e)
		t.index[a.fp] = e
	}
}

// peek returns up to n of the oldest queued alerts, by value, and their
// sequence numbers.
func (t *target) peek(n int) ([]postableAlert, map[uint64]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(n, len(t.queue))
	if n == 0 {
		return nil, nil
	}
	batch := make([]postableAlert, n)
	seqs := make(map[uint64]bool, n)
	for i, e := range t.queue[:n] {
		batch[i] = e.alert
		seqs[e.seq] = true
	}
	return batch, seqs
}

// remove takes out of the queue the entries still holding the copies that
// were sent; an entry replaced meanwhile by a newer copy stays, to be sent.
func (t *target) remove(seqs map[uint64]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.queue[:0]
	for _, e := range t.queue {
		if seqs[e.seq] {
			delete(t.index, e.fp)
			continue
		}
		kept = append(kept, e)
	}
	clear(t.queue[len(kept):])
	t.queue = kept
}

func (t *target) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// Stats returns the sender's counters.
func (s *Sender) Stats() SenderStats {
	st := SenderStats{Sent: s.sent.Load(), Failed: s.failed.Load(), Dropped: s.dropped.Load()}
	for _, t := range s.targets {
		st.Queued += t.len()
	}
	return st
}

// Run delivers queued alerts until ctx is done, then returns once every
// request in flight has ended. It may be called once.
func (s *Sender) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("alert sender: Run called twice")
	}
	var wg sync.WaitGroup
	for _, t := range s.targets {
		wg.Go(func() { s.deliver(ctx, t) })
	}
	wg.Wait()
	return nil
}

// deliver posts t's queue in batches, oldest first, retrying a failed batch
// with capped exponential backoff.
func (s *Sender) deliver(ctx context.Context, t *target) {
	log := s.cfg.Logger.With("alertmanager", t.endpoint)
	backoff := s.cfg.MinBackoff
	for {
		batch, seqs := t.peek(maxBatch)
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-t.wake:
				continue
			}
		}
		err := s.post(ctx, t.endpoint, batch)
		if ctx.Err() != nil {
			return
		}
		var rejected *rejectedError
		switch {
		case err == nil:
			// Count before removing, so that a caller who sees the queue
			// empty sees the count too.
			s.sent.Add(uint64(len(batch)))
			t.remove(seqs)
			backoff = s.cfg.MinBackoff
			continue
		case errors.As(err, &rejected):
			// Sending the same alerts again would be rejected again.
			s.failed.Add(1)
			s.dropped.Add(uint64(len(batch)))
			t.remove(seqs)
			log.Error("alertmanager rejected alerts; dropped them", "alerts", len(batch), "err", err)
			continue
		}
		s.failed.Add(1)
		log.Warn("send alerts failed; will retry", "alerts", len(batch), "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// retryable reports whether a 4xx answer may change on its own: a time-out
// or a rate limit passes, and a refused credential is fixed by rotating the
// secret, which the client reads again for each request. The alerts wait in
// their queue meanwhile.
func retryable(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden:
		return true
	}
	return false
}

// rejectedError is a 4xx answer other than retryable's: the alerts, not
// Alertmanager or the credentials, are at fault.
type rejectedError struct {
	status string
	body   string
}

func (e *rejectedError) Error() string { return fmt.Sprintf("%s: %s", e.status, e.body) }

func (s *Sender) post(ctx context.Context, endpoint string, batch []postableAlert) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return &rejectedError{status: "encode", body: err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "leasewatch")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	switch code := resp.StatusCode; {
	case code/100 == 2:
		return nil
	case code/100 == 4 && !retryable(code):
		return &rejectedError{status: resp.Status, body: string(bytes.TrimSpace(msg))}
	default:
		return fmt.Errorf("POST %s: %s: %s", endpoint, resp.Status, bytes.TrimSpace(msg))
	}
}
