package web

import (
	"net/url"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/web/present"
)

func TestParseWindow(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		q        string
		loc      *time.Location
		from, to time.Time
		preset   string
	}{
		{"DefaultHourEndingNow", "", time.UTC, at.Add(-time.Hour), at, "1h"},
		{"Preset", "window=7d", time.UTC, at.Add(-7 * 24 * time.Hour), at, "7d"},
		{"Custom", "from=2025-03-01T10:00:00Z&to=2025-03-01T10:30:00Z", time.UTC, at.Add(-2 * time.Hour), at.Add(-90 * time.Minute), ""},
		{"FromOnlyKeepsThePresetLength", "window=15m&from=2025-03-01T10:00:00Z", time.UTC, at.Add(-2 * time.Hour), at.Add(-105 * time.Minute), ""},
		{"ToOnly", "to=2025-03-01T10:00:00Z", time.UTC, at.Add(-3 * time.Hour), at.Add(-2 * time.Hour), ""},
		{"DatetimeLocalInTheZone", "from=2025-03-01T11:00&to=2025-03-01T11:30:15", paris, at.Add(-2 * time.Hour), at.Add(-90*time.Minute + 15*time.Second), ""},
		{"TinyWindowIsASecond", "from=2025-03-01T10:00:00Z&to=2025-03-01T10:00:00.001Z", time.UTC, at.Add(-2 * time.Hour), at.Add(-2*time.Hour + time.Second), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.q)
			w, err := parseWindow(q, at, tc.loc)
			if err != nil {
				t.Fatalf("parseWindow(%s): %v", tc.q, err)
			}
			if !w.From.Equal(tc.from) || !w.To.Equal(tc.to) || w.Preset != tc.preset {
				t.Errorf("window = %v → %v (%q), want %v → %v (%q)", w.From, w.To, w.Preset, tc.from, tc.to, tc.preset)
			}
		})
	}
	for _, bad := range []string{"window=2h", "from=yesterday", "from=2025-03-01T10:00:00Z&to=2025-03-01T09:00:00Z",
		"from=2025-01-01T00:00:00Z&to=2025-06-01T00:00:00Z"} {
		q, _ := url.ParseQuery(bad)
		if _, err := parseWindow(q, at, time.UTC); audit.ErrorCode(err) != audit.EINVALID {
			t.Errorf("parseWindow(%s) err = %v, want EINVALID", bad, err)
		}
	}
}

func TestParseZoneAndCursor(t *testing.T) {
	for q, want := range map[string]string{"": "UTC", "tz=UTC": "UTC", "tz=Asia/Tokyo": "Asia/Tokyo", "tz=local": time.Local.String()} {
		v, _ := url.ParseQuery(q)
		loc, err := parseZone(v)
		if err != nil || loc.String() != want {
			t.Errorf("parseZone(%s) = %v, %v; want %s", q, loc, err, want)
		}
	}
	for _, bad := range []string{"tz=Mars/Olympus", "tz=../../etc/passwd"} {
		v, _ := url.ParseQuery(bad)
		if _, err := parseZone(v); audit.ErrorCode(err) != audit.EINVALID {
			t.Errorf("parseZone(%s) err = %v, want EINVALID", bad, err)
		}
	}

	at := time.Date(2025, 3, 1, 12, 0, 0, 123, time.UTC)
	v := url.Values{"before": {present.FormatCursor(at, 42)}}
	c, err := parseCursor(v, "before")
	if err != nil || !c.At.Equal(at) || c.ID != 42 {
		t.Errorf("cursor round trip = %+v, %v", c, err)
	}
	for _, bad := range []string{"x", "1-", "-5", "1-0", "a-b"} {
		if _, err := parseCursor(url.Values{"before": {bad}}, "before"); audit.ErrorCode(err) != audit.EINVALID {
			t.Errorf("parseCursor(%q) err = %v, want EINVALID", bad, err)
		}
	}
}
