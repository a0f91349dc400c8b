package fence

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	r := &Reporter{cfg: Config{MaxRetryDelay: time.Second}}
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond, 200 * time.Millisecond},
		{4, 0, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 0, 500 * time.Millisecond, time.Second}, // capped
		{1000, 0, 500 * time.Millisecond, time.Second},
		{1, 700 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond},
		{1, time.Hour, time.Second, time.Second}, // Retry-After is capped too
	}
	for _, tc := range tests {
		for range 100 {
			if d := r.backoff(tc.attempt, tc.retryAfter); d < tc.lo || d > tc.hi {
				t.Fatalf("backoff(%d, %v) = %v, want within [%v, %v]", tc.attempt, tc.retryAfter, d, tc.lo, tc.hi)
			}
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	if got := parseRetryAfter("3"); got != 3*time.Second {
		t.Errorf("parseRetryAfter(3) = %v, want 3s", got)
	}
	for _, v := range []string{"", "-1", "soon"} {
		if got := parseRetryAfter(v); got != 0 {
			t.Errorf("parseRetryAfter(%q) = %v, want 0", v, got)
		}
	}
	date := time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)
	if got := parseRetryAfter(date); got < 58*time.Second || got > time.Minute {
		t.Errorf("parseRetryAfter(%q) = %v, want about 1m", date, got)
	}
}
