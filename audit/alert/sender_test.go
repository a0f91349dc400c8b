package alert_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/alert/alertmanagertest"
)

// nearExpiry is a firing alert on lock /locks/orders-N of source prod-etcd.
func nearExpiry(n int, startsAt time.Time) alert.Alert {
	return alert.Alert{
		Labels: map[string]string{
			alert.LabelAlertName: alert.LeaseNearExpiry,
			alert.LabelSeverity:  "warning",
			alert.LabelSource:    "prod-etcd",
			alert.LabelLock:      fmt.Sprintf("/locks/orders-%d", n),
			alert.LabelHolder:    "worker-a",
		},
		Annotations: map[string]string{alert.AnnotationSummary: fmt.Sprintf("lease of /locks/orders-%d runs out", n)},
		StartsAt:    startsAt,
	}
}

// run starts s until the test ends, and checks that Run returns promptly
// once its context is cancelled.
func run(t *testing.T, s *alert.Sender) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return within 5s of its context's cancel")
		}
	})
}

func newSender(t *testing.T, cfg alert.SenderConfig) *alert.Sender {
	t.Helper()
	s, err := alert.NewSender(cfg)
	if err != nil {
		t.Fatalf("NewSender: %v", err)
	}
	return s
}

// waitFor polls cond until it holds or 20s pass.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, still waiting for %s: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// locksIn waits until Alertmanager holds exactly the alerts on want (lock
// labels), and returns them by lock.
func locksIn(t *testing.T, am *alertmanagertest.Alertmanager, want []string) map[string]alertmanagertest.Alert {
	t.Helper()
	var got map[string]alertmanagertest.Alert
	waitFor(t, fmt.Sprintf("alertmanager to hold alerts on %v", want), func() (bool, string) {
		alerts, err := am.Alerts(context.Background())
		if err != nil {
			return false, err.Error()
		}
		got = make(map[string]alertmanagertest.Alert)
		var locks []string
		for _, a := range alerts {
			got[a.Labels[alert.LabelLock]] = a
			locks = append(locks, a.Labels[alert.LabelLock])
		}
		slices.Sort(locks)
		return len(alerts) == len(want) && len(got) == len(want) && slices.Equal(locks, sorted(want)), fmt.Sprintf("holds %v", locks)
	})
	return got
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func lockNames(from, to int) []string {
	var names []string
	for i := from; i < to; i++ {
		names = append(names, fmt.Sprintf("/locks/orders-%d", i))
	}
	return names
}

func TestSenderAlertmanagerRoundTrip(t *testing.T) {
	am := alertmanagertest.Start(t)
	s := newSender(t, alert.SenderConfig{URLs: []string{am.URL}, ExternalURL: "http://leasewatch.example:8080/lw/"})
	run(t, s)
	startsAt := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	fire := nearExpiry(1, startsAt)

	s.Send([]alert.Alert{fire})
	got := locksIn(t, am, []string{"/locks/orders-1"})["/locks/orders-1"]
	for name, want := range fire.Labels {
		if got.Labels[name] != want {
			t.Errorf("label %s = %q, want %q", name, got.Labels[name], want)
		}
	}
	if len(got.Labels) != len(fire.Labels) {
		t.Errorf("labels = %v, want %v", got.Labels, fire.Labels)
	}
	const link = "http://leasewatch.example:8080/lw/locks?class=all&name=%2Flocks%2Forders-1&source=prod-etcd"
	if got.Annotations[alert.AnnotationSummary] != fire.Annotations[alert.AnnotationSummary] || got.Annotations[alert.AnnotationTimeline] != link {
		t.Errorf("annotations = %v, want summary %q and %s %q", got.Annotations, fire.Annotations[alert.AnnotationSummary], alert.AnnotationTimeline, link)
	}
	if got.GeneratorURL != link {
		t.Errorf("generatorURL = %q, want %q", got.GeneratorURL, link)
	}
	if !got.StartsAt.Equal(startsAt) {
		t.Errorf("startsAt = %v, want %v", got.StartsAt, startsAt)
	}
	// Firing alerts carry an end 4×ResendEvery ahead, so Alertmanager
	// resolves them by itself if re-sends stop.
	if d := time.Until(got.EndsAt); d < 3*time.Minute || d > 4*time.Minute+time.Second {
		t.Errorf("endsAt = %v, %v from now, want about 4m (4×ResendEvery)", got.EndsAt, d)
	}
	if got.Fingerprint != fire.Fingerprint() {
		t.Errorf("alertmanager's fingerprint = %s, alert.Fingerprint = %s: they should agree", got.Fingerprint, fire.Fingerprint())
	}

	// The caller re-sends a firing alert: Alertmanager still holds one.
	s.Send([]alert.Alert{fire})
	waitFor(t, "the re-send to leave the queue", func() (bool, string) {
		st := s.Stats()
		return st.Sent == 2 && st.Queued == 0, fmt.Sprintf("%+v", st)
	})
	locksIn(t, am, []string{"/locks/orders-1"})

	resolved := fire
	resolved.EndsAt = time.Now().Add(-time.Second)
	s.Send([]alert.Alert{resolved})
	locksIn(t, am, nil)
	waitFor(t, "the queue to empty", func() (bool, string) {
		st := s.Stats()
		return st.Queued == 0, fmt.Sprintf("%+v", st)
	})
	if st := s.Stats(); st.Sent != 3 || st.Failed != 0 || st.Dropped != 0 {
		t.Errorf("stats = %+v, want 3 sent, none failed or dropped", st)
	}
}

func TestSenderAlertmanagerDownThenBack(t *testing.T) {
	am := alertmanagertest.Start(t)
	am.Stop()
	s := newSender(t, alert.SenderConfig{URLs: []string{am.URL}, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	run(t, s)
	startsAt := time.Now().Add(-time.Minute)
	var first []alert.Alert
	for i := range 10 {
		first = append(first, nearExpiry(i, startsAt))
	}
	s.Send(first)
	waitFor(t, "a failed send to the stopped alertmanager", func() (bool, string) {
		st := s.Stats()
		return st.Failed >= 2, fmt.Sprintf("%+v", st)
	})
	// While it is down, the caller re-sends what still fires, and more fires.
	var more []alert.Alert
	for i := range 20 {
		more = append(more, nearExpiry(i, startsAt))
	}
	s.Send(more)
	if st := s.Stats(); st.Queued != 20 || st.Sent != 0 || st.Dropped != 0 {
		t.Fatalf("stats while down = %+v, want 20 queued (re-sends replace their queued copies), none sent or dropped", st)
	}

	am.Start()
	locksIn(t, am, lockNames(0, 20))
	waitFor(t, "the queue to empty", func() (bool, string) {
		st := s.Stats()
		return st.Queued == 0, fmt.Sprintf("%+v", st)
	})
	if st := s.Stats(); st.Sent != 20 || st.Dropped != 0 {
		t.Errorf("stats = %+v, want each of the 20 alerts sent once, none dropped", st)
	}
}

func TestSenderFullQueueDropsOldest(t *testing.T) {
	am := alertmanagertest.Start(t)
	s := newSender(t, alert.SenderConfig{URLs: []string{am.URL}, Queue: 5})
	startsAt := time.Now().Add(-time.Minute)
	// Not running yet: everything waits in the queue.
	for i := range 12 {
		s.Send([]alert.Alert{nearExpiry(i, startsAt)})
	}
	if st := s.Stats(); st.Queued != 5 || st.Dropped != 7 {
		t.Fatalf("stats = %+v, want 5 queued and the 7 oldest dropped", st)
	}
	run(t, s)
	locksIn(t, am, lockNames(7, 12))
	waitFor(t, "the queue to empty", func() (bool, string) {
		st := s.Stats()
		return st.Queued == 0, fmt.Sprintf("%+v", st)
	})
	if st := s.Stats(); st.Sent != 5 || st.Dropped != 7 {
		t.Errorf("stats = %+v, want 5 sent, 7 dropped", st)
	}
}

// An Alertmanager that accepts connections and never answers must not slow
// the caller, and Run must still stop promptly.
func TestSenderSendNeverBlocks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // keep them open, unanswered
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	s := newSender(t, alert.SenderConfig{URLs: []string{"http://" + ln.Addr().String(), "http://127.0.0.1:1"}, Queue: 1000, Timeout: time.Minute})
	run(t, s)
	startsAt := time.Now()
	const calls, per = 2000, 10
	start := time.Now()
	batch := make([]alert.Alert, per)
	for c := range calls {
		for i := range batch {
			batch[i] = nearExpiry(c*per+i, startsAt)
		}
		s.Send(batch)
	}
	// A Send that waited on delivery would wait out the minute's timeout.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%d Send calls took %v with no Alertmanager answering, want well under 10s", calls, d)
	}
	st := s.Stats()
	if st.Queued != 2*1000 || st.Dropped != 2*(calls*per-1000) {
		t.Errorf("stats = %+v, want each URL's queue full (2×1000) and the rest dropped (%d)", st, 2*(calls*per-1000))
	}
}

// Server errors are retried with backoff; a request Alertmanager rejects is
// dropped, since sending it again cannot succeed.
func TestSenderRetriesServerErrorsDropsRejected(t *testing.T) {
	var calls atomic.Int32
	status := func(n int32) int {
		switch n {
		case 1, 2:
			return http.StatusServiceUnavailable
		case 4:
			return http.StatusBadRequest
		}
		return http.StatusOK
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/am/api/v2/alerts" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s (%s), want POST /am/api/v2/alerts (application/json)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		w.WriteHeader(status(calls.Add(1)))
	}))
	defer srv.Close()
	s := newSender(t, alert.SenderConfig{URLs: []string{srv.URL + "/am/"}, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond})
	run(t, s)
	s.Send([]alert.Alert{nearExpiry(1, time.Now()), nearExpiry(2, time.Now())})
	waitFor(t, "delivery after two 503s", func() (bool, string) {
		st := s.Stats()
		return st.Sent == 2 && st.Failed == 2, fmt.Sprintf("%+v", st)
	})
	s.Send([]alert.Alert{nearExpiry(3, time.Now())})
	waitFor(t, "the rejected alert dropped", func() (bool, string) {
		st := s.Stats()
		return st.Dropped == 1 && st.Failed == 3 && st.Queued == 0, fmt.Sprintf("%+v", st)
	})
}

func TestNewSenderRejectsBadURLs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  alert.SenderConfig
	}{
		{"NoURL", alert.SenderConfig{}},
		{"NotHTTP", alert.SenderConfig{URLs: []string{"ftp://am:9093"}}},
		{"NoHost", alert.SenderConfig{URLs: []string{"http://"}}},
		{"Unparsable", alert.SenderConfig{URLs: []string{"http://am:port"}}},
		{"BadExternalURL", alert.SenderConfig{URLs: []string{"http://am:9093"}, ExternalURL: "leasewatch.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := alert.NewSender(tc.cfg); err == nil {
				t.Errorf("NewSender(%+v) = nil error, want one", tc.cfg)
			}
		})
	}
}

// Each URL has its own queue: an Alertmanager that is down delays only its
// own deliveries, and gets them when it is back.
func TestSenderOneAlertmanagerDownDelaysOnlyItself(t *testing.T) {
	up := alertmanagertest.Start(t)
	down := alertmanagertest.Start(t)
	down.Stop()
	s := newSender(t, alert.SenderConfig{URLs: []string{down.URL, up.URL}, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	run(t, s)
	s.Send([]alert.Alert{nearExpiry(1, time.Now()), nearExpiry(2, time.Now())})
	locksIn(t, up, lockNames(1, 3))
	waitFor(t, "the alerts for the one up to leave its queue", func() (bool, string) {
		st := s.Stats()
		return st.Sent == 2 && st.Queued == 2, fmt.Sprintf("%+v, want 2 sent (to the one up) and 2 queued (for the one down)", st)
	})
	down.Start()
	locksIn(t, down, lockNames(1, 3))
	waitFor(t, "the queues to empty", func() (bool, string) {
		st := s.Stats()
		return st.Sent == 4 && st.Queued == 0, fmt.Sprintf("%+v", st)
	})
}
