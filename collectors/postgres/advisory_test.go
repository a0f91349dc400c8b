package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

func TestRowKey(t *testing.T) {
	for _, tc := range []struct {
		classid, objid uint32
		objsubid       int16
		want           string
	}{
		{0, 7, 1, "7"},
		{0xffffffff, 0xfffffffb, 1, "-5"},                    // pg_advisory_lock(-5)
		{0x51b6_2ab9, 0x3086_3b66, 1, "5887940537704921958"}, // goose's DefaultLockID
		{0x8000_0000, 0, 1, "-9223372036854775808"},
		{1, 0xfffffffe, 2, "1,-2"}, // pg_advisory_lock(1, -2)
		{0x8000_0000, 0x7fff_ffff, 2, "-2147483648,2147483647"},
	} {
		r := row{db: "app", classid: tc.classid, objid: tc.objid, objsubid: tc.objsubid}
		if got := r.lock(); got != "app/"+tc.want {
			t.Errorf("classid %#x objid %#x objsubid %d: lock %q, want app/%s", tc.classid, tc.objid, tc.objsubid, got, tc.want)
		}
	}
}

func TestHolder(t *testing.T) {
	started := time.Date(2026, 12, 7, 17, 39, 37, 793134000, time.UTC)
	for _, tc := range []struct {
		s    session
		want string
	}{
		{session{pid: 42, started: started, app: "migrate", addr: "10.0.0.7", port: 51234},
			"migrate pid=42 client=10.0.0.7:51234 started=2026-12-07T17:39:37.793134Z"},
		{session{pid: 42, started: started, addr: "::1", port: 5}, "pid=42 client=[::1]:5 started=2026-12-07T17:39:37.793134Z"},
		{session{pid: 42, started: started, port: -1}, "pid=42 client=local started=2026-12-07T17:39:37.793134Z"},
		{session{pid: 42}, "pid=42"}, // another user's session, without pg_read_all_stats
		{session{}, "prepared transaction 3/7"},
	} {
		if got := tc.s.holder("3/7"); got != tc.want {
			t.Errorf("holder = %q, want %q", got, tc.want)
		}
	}
}

func TestEnding(t *testing.T) {
	for _, tc := range []struct {
		what   string
		h      hold
		f      fate
		kind   audit.EventKind
		level  string
		reason string
	}{
		{"released, seen idle", hold{s: session{pid: 1}, vxid: "3/0", outside: true}, fate{alive: true}, audit.EventRelease, levelSession, "released"},
		{"released within the transaction it was seen in", hold{s: session{pid: 1}, vxid: "3/9"}, fate{alive: true, vxid: "3/9"}, audit.EventRelease, levelSession, "released"},
		{"gone with its transaction", hold{s: session{pid: 1}, vxid: "3/9"}, fate{alive: true, vxid: "3/10"}, audit.EventRelease, levelTransaction, "released"},
		{"gone with its transaction, session idle now", hold{s: session{pid: 1}, vxid: "3/9"}, fate{alive: true}, audit.EventRelease, levelTransaction, "released"},
		{"session gone, uncounted", hold{s: session{pid: 1}, vxid: "3/9"}, fate{}, audit.EventExpire, levelUnknown, "terminated"},
		{"session closed by its client", hold{s: session{pid: 1}, vxid: "3/0", outside: true}, fate{counted: true}, audit.EventRelease, levelSession, "its client closed"},
		{"session ended abnormally", hold{s: session{pid: 1}, vxid: "3/9"}, fate{counted: true, abnormal: 1}, audit.EventExpire, levelUnknown, "ended abnormally"},
		{"session lock, session gone", hold{s: session{pid: 1}, vxid: "3/0", outside: true}, fate{}, audit.EventExpire, levelSession, "terminated"},
		{"prepared transaction", hold{vxid: "-1/5"}, fate{}, audit.EventRelease, levelUnknown, "prepared"},
	} {
		kind, level, reason := ending(&tc.h, tc.f)
		if kind != tc.kind || level != tc.level || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: %s, %s, %q; want %s, %s, a reason with %q", tc.what, kind, level, reason, tc.kind, tc.level, tc.reason)
		}
	}
}

// TestHandovers: a lock held by another session in the next poll is an end
// and a grant, a pid reused by a new session is another holder, and a row
// whose session has left pg_stat_activity is still its holder's.
func TestHandovers(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	a := session{pid: 10, started: t0}
	b := session{pid: 11, started: t0}
	reused := session{pid: 10, started: t0.Add(time.Hour)}
	excl := func(objid uint32, s session) row {
		return row{db: "d", objid: objid, objsubid: 1, mode: modeExclusive, granted: true, vxid: "3/0", s: s}
	}
	exiting := session{pid: 12} // gone from pg_stat_activity, its lock not yet from pg_locks
	prev := newState(t0, t0, []row{excl(1, a), excl(2, a), excl(3, b), excl(5, session{pid: 12, started: t0})}, nil)
	cur := newState(t0.Add(time.Second), t0, []row{excl(1, a), excl(2, b), excl(3, reused), excl(5, exiting),
		{db: "d", objid: 4, objsubid: 1, mode: modeShared, granted: true, s: a}}, prev)
	ended, granted := handovers(prev, cur)
	if got := locks(ended); got != "d/2 d/3" {
		t.Errorf("ended %s, want d/2 d/3", got)
	}
	if got := locks(granted); got != "d/2 d/3" {
		t.Errorf("granted %s, want d/2 d/3 (a shared hold is no grant)", got)
	}
	if cur.shared["d/4"] != 1 {
		t.Errorf("shared holds %v, want d/4 once", cur.shared)
	}
}

func locks(hs []*hold) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.lock)
	}
	return strings.Join(out, " ")
}

// TestGrantWaited: a grant to a session the previous poll saw waiting says
// how long it waited, between the two polls' times less its waitstart, and
// counts who waits behind it.
func TestGrantWaited(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	a, b, c := session{pid: 1, started: t0}, session{pid: 2, started: t0}, session{pid: 3, started: t0}
	wait := func(s session, since time.Time) row {
		return row{db: "d", objid: 9, objsubid: 1, mode: modeExclusive, waitStart: since, vxid: "4/2", s: s}
	}
	prev := newState(t0.Add(3*time.Second), t0, []row{
		{db: "d", objid: 9, objsubid: 1, mode: modeExclusive, granted: true, vxid: "3/0", s: a},
		wait(b, t0.Add(time.Second)), wait(c, t0.Add(2*time.Second))}, nil)
	cur := newState(t0.Add(4*time.Second), t0, []row{
		{db: "d", objid: 9, objsubid: 1, mode: modeExclusive, granted: true, vxid: "4/2", s: b},
		wait(c, t0.Add(2*time.Second))}, prev)
	_, granted := handovers(prev, cur)
	ob := observer{source: "pg"}.grant(granted[0], prev, cur, t0, false)
	want := map[string]any{"pid": int32(2), "level": levelUnknown, "waiters": 1, "waited_ms_min": int64(2000), "waited_ms_max": int64(3000)}
	for k, v := range want {
		if ob.Detail[k] != v {
			t.Errorf("detail %s = %v (%T), want %v (%T)", k, ob.Detail[k], ob.Detail[k], v, v)
		}
	}
	if ob.Kind != audit.EventGrant || ob.Token != nil {
		t.Errorf("kind %s token %v, want an unfenced grant", ob.Kind, ob.Token)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Name: "pg", URL: "postgres://leasewatch@db:5432/app?sslmode=disable"}
	for _, tc := range []struct {
		change func(*Config)
		want   string // "" for valid
	}{
		{func(*Config) {}, ""},
		{func(c *Config) { c.URL = "host=db dbname=app user=leasewatch" }, ""},
		{func(c *Config) { c.URL = "" }, "url: required"},
		{func(c *Config) { c.URL = "postgres://u:secret@db/app" }, "url: holds a password"},
		{func(c *Config) { c.URL = "postgres://u@db/app?password=secret" }, "url: holds a password"},
		{func(c *Config) { c.URL = "host=db password=secret dbname=app" }, "url: holds a password"},
		{func(c *Config) { c.URL = "postgres://db:notaport/app" }, "url: "},
		{func(c *Config) { c.URL = "postgres://db:5432" }, "url: names no database"},
		{func(c *Config) { c.URL = "postgres://db:5432"; c.Databases = []string{"a"} }, ""},
		{func(c *Config) { c.Databases = []string{"*"} }, ""},
		{func(c *Config) { c.Databases = []string{"*", "a"} }, "databases[0]: \"*\" watches every database"},
		{func(c *Config) { c.Databases = []string{"a", "a"} }, "databases[1]: \"a\" given twice"},
		{func(c *Config) { c.Databases = []string{" a"} }, "databases[0]: "},
		{func(c *Config) { c.Databases = []string{strings.Repeat("a", 64)} }, "databases[0]: longer than"},
		{func(c *Config) { c.PollEvery = 10 * time.Millisecond }, "poll_every: 10ms is below the minimum 50ms"},
		{func(c *Config) { c.PollEvery = 2 * time.Minute }, "poll_every: 2m0s is above the maximum 1m0s"},
		{func(c *Config) { c.TLS = collectors.StaticTLS(nil) }, "url: sslmode=disable refuses the tls"},
		{func(c *Config) { c.TLS = collectors.StaticTLS(nil); c.URL = "postgres://db/app?sslmode=verify-full" }, ""},
	} {
		cfg := ok
		tc.change(&cfg)
		err := Validate(cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", cfg, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error starting %q", cfg, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%+v: the error %q shows the password", cfg, err)
		}
	}
}
