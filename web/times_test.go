package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// A report's at outside what the service keeps, or more than the allowed
// skew after receipt, is refused with a 400 naming at, and nothing of the
// request is stored; the bounds themselves are accepted.
func TestIngestRefusesTimesItCannotKeep(t *testing.T) {
	f := newFixture(t)
	report := func(lock, at string) string {
		return `{"source":"cache","lock":"` + lock + `","resource":"r","outcome":"accepted","at":"` + at + `"}`
	}
	for _, tc := range []struct{ name, at, want string }{
		{"Year9999", "9999-12-31T23:59:59Z", "at: must not be more than 5m0s after"},
		{"Year2200", "2200-01-01T00:00:00Z", "at: must not be more than 5m0s after"},
		{"JustPastTheSkew", now.Add(maxReportSkew + time.Nanosecond).Format(time.RFC3339Nano), "at: must not be more than 5m0s after"},
		{"YearZero", "0000-01-01T00:00:00Z", "at: must not be before 1678-01-01T00:00:00Z"},
		{"YearOne", "0001-01-01T00:00:00Z", "at: must not be before 1678-01-01T00:00:00Z"},
		{"Year1677", "1677-12-31T23:59:59.999999999Z", "at: must not be before 1678"},
		{"OffsetIntoThePast", "1678-01-01T00:00:00+01:00", "at: must not be before 1678"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, m := f.post(t, report("lock:bad", tc.at), bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST at %s = %d %v, want 400", tc.at, res.StatusCode, m)
			}
			wantError(t, m, tc.want)
			// In an array the message names the report, and the valid
			// report before it is not stored either.
			res, m = f.post(t, `[`+report("lock:bad", now.Format(time.RFC3339Nano))+`,`+report("lock:bad", tc.at)+`]`, bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST array = %d %v, want 400", res.StatusCode, m)
			}
			wantError(t, m, "writes[1]."+tc.want)
		})
	}
	if ev := f.writeEvents(t, "cache", "lock:bad"); len(ev) != 0 {
		t.Fatalf("refused reports stored %d events: %+v", len(ev), ev)
	}

	for _, at := range []time.Time{earliestReport, now.Add(maxReportSkew), time.Unix(0, 0).UTC()} {
		lock := "lock:ok-" + at.Format("2006")
		res, m := f.post(t, report(lock, at.Format(time.RFC3339Nano)), bearer)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("POST at %v = %d %v, want 202", at, res.StatusCode, m)
		}
		if ev := f.writeEvents(t, "cache", lock); len(ev) != 1 || !ev[0].At.Equal(at) {
			t.Errorf("report at %v stored as %+v, want one event at that time", at, ev)
		}
	}
}

// A report dated 1970-01-01T00:00:00Z comes back from the API at that time,
// not as null.
func TestIngestEpochRoundTripsThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	res, m := f.post(t, `{"source":"cache","lock":"lock:epoch","resource":"r","token":3,"outcome":"accepted","at":"1970-01-01T00:00:00Z"}`, bearer)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST = %d %v, want 202", res.StatusCode, m)
	}
	l, err := f.store.LockByKey(t.Context(), audit.LockKey{Source: "cache", Name: "lock:epoch"})
	if err != nil {
		t.Fatal(err)
	}
	events := list(t, f.getJSON(t, "/api/v1/locks/"+itoa(l.ID)+"/events", http.StatusOK), "events")
	if len(events) != 1 || events[0]["at"] != "1970-01-01T00:00:00Z" {
		t.Fatalf("events = %v, want one at 1970-01-01T00:00:00Z", events)
	}
}

// Windows whose bounds lie outside what the store keeps are clamped, never
// emptied: to=2263 or 2300 and from=0001 return the data inside them, on
// every list that takes a window.
func TestQueryWindowBeyondTheRangeReturnsTheData(t *testing.T) {
	f := newFixture(t)
	orders := itoa(f.orders.ID)
	for _, path := range []string{
		"/api/v1/locks/" + orders + "/events", "/api/v1/locks/" + orders + "/tenures", "/api/v1/findings",
	} {
		key := path[strings.LastIndex(path, "/")+1:]
		all := len(list(t, f.getJSON(t, path, http.StatusOK), key))
		if all == 0 {
			t.Fatalf("%s: nothing without a window", path)
		}
		for _, w := range []url.Values{
			{"to": {"2263-01-01T00:00:00Z"}},
			{"from": {"0001-01-01T00:00:00Z"}, "to": {"2300-01-01T00:00:00Z"}},
			{"from": {"1600-01-01T00:00:00Z"}, "to": {"9999-12-31T23:59:59Z"}},
		} {
			if n := len(list(t, f.getJSON(t, path+"?"+w.Encode(), http.StatusOK), key)); n != all {
				t.Errorf("%s?%s: %d %s, want all %d", path, w.Encode(), n, key, all)
			}
		}
	}
}

// A review from 0001-01-01 covers everything up to its end; it does not
// turn into the hour before to, as an absent from does.
func TestReviewFromYearOneIsNotUnset(t *testing.T) {
	f := newFixture(t)
	to := now.Format(time.RFC3339Nano)
	q := url.Values{"from": {"0001-01-01T00:00:00Z"}, "to": {to}, "lock": {itoa(f.orders.ID)}}
	m := f.getJSON(t, "/review.json?"+q.Encode(), http.StatusOK)
	if m["from"] != audit.EarliestTime.Format(time.RFC3339Nano) || m["to"] != to {
		t.Fatalf("review window = %v to %v, want from %v (the earliest time kept) to %v", m["from"], m["to"], audit.EarliestTime, to)
	}
	// The first tenure (granted at t0, two hours before to) is reviewed.
	if h, ok := m["handovers"].(float64); !ok || h < 1 {
		t.Errorf("handovers = %v, want the handover an hour before to", m["handovers"])
	}
	q.Set("to", "2300-01-01T00:00:00Z")
	if m := f.getJSON(t, "/review.json?"+q.Encode(), http.StatusOK); m["to"] != audit.LatestTime.Format(time.RFC3339Nano) {
		t.Errorf("review to = %v, want %v (the latest time kept)", m["to"], audit.LatestTime)
	}
}
