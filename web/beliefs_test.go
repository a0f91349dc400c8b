package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// jobs is the lock the belief tests hand over: worker-1 holds token 41
// from now-10m and releases it at now-9m; worker-2 holds token 42 from
// now-8m.
var jobs = audit.LockKey{Source: "prod-etcd", Name: "/locks/jobs"}

func (f *fixture) handOverJobs(t *testing.T) {
	t.Helper()
	for _, ob := range []audit.Observation{
		{Kind: audit.EventGrant, At: now.Add(-10 * time.Minute), Holder: "worker-1", Token: audit.Int64(41)},
		{Kind: audit.EventRelease, At: now.Add(-9 * time.Minute), Holder: "worker-1", Token: audit.Int64(41)},
		{Kind: audit.EventGrant, At: now.Add(-8 * time.Minute), Holder: "worker-2", Token: audit.Int64(42)},
	} {
		ob.Lock, ob.LeaseDuration = jobs, 10*time.Second
		if err := f.rec.Record(context.Background(), audit.Input{Source: jobs.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}); err != nil {
			t.Fatalf("observe %s: %v", ob.Kind, err)
		}
	}
}

// zombieRecords returns the jobs lock's zombie_belief events and
// zombie_holder findings.
func (f *fixture) zombieRecords(t *testing.T) ([]audit.Event, []audit.Finding) {
	t.Helper()
	ctx := context.Background()
	l, err := f.store.LockByKey(ctx, jobs)
	if err != nil {
		t.Fatalf("lock %v: %v", jobs, err)
	}
	events, err := f.store.Events(ctx, l.ID, audit.EventFilter{Kind: audit.EventZombieBelief})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	findings, err := f.store.Findings(ctx, audit.FindingFilter{LockID: l.ID, Kind: audit.FindingZombieHolder})
	if err != nil {
		t.Fatalf("findings: %v", err)
	}
	return events, findings
}

func TestBeliefsZombieHolder(t *testing.T) {
	f := newFixture(t)
	f.handOverJobs(t)
	// worker-2 holds token 42: its belief is the current tenure's, and
	// records nothing.
	res, m := f.postTo(t, "/api/v1/beliefs", `{"source":"prod-etcd","lock":"/locks/jobs","holder":"worker-2","token":42}`, bearer)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST current belief = %d %v, want 202", res.StatusCode, m)
	}
	wantNumber(t, "accepted", m["accepted"], 1)
	if events, findings := f.zombieRecords(t); len(events)+len(findings) != 0 {
		t.Fatalf("a belief of the held tenure recorded %+v %+v", events, findings)
	}

	// worker-1 released token 41 at now-9m; it still acts at now-8m,
	// now-7m50s and now. The second belief says little more than the first
	// of how long the zombie went on (70 s against 60 s), so only the first
	// and the last are events.
	zombie := `[{"source":"prod-etcd","lock":"/locks/jobs","holder":"worker-1","token":41,"at":"` +
		now.Add(-8*time.Minute).Format(time.RFC3339Nano) + `"},
		{"source":"prod-etcd","lock":"/locks/jobs","holder":"worker-1","token":41,"at":"` +
		now.Add(-7*time.Minute-50*time.Second).Format(time.RFC3339Nano) + `"},
		{"source":"prod-etcd","lock":"/locks/jobs","holder":"worker-1","token":41}]`
	res, m = f.postTo(t, "/api/v1/beliefs", zombie, bearer)
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("POST zombie beliefs = %d %v, want 202", res.StatusCode, m)
	}
	wantNumber(t, "accepted", m["accepted"], 3)
	events, findings := f.zombieRecords(t)
	if len(events) != 2 || !events[0].At.Equal(now.Add(-8*time.Minute)) || !events[1].At.Equal(now) ||
		events[1].Holder != "worker-1" || events[1].Token == nil || *events[1].Token != 41 {
		t.Fatalf("zombie_belief events = %+v, want two of worker-1, token 41, at now-8m and now", events)
	}
	if len(findings) != 1 {
		t.Fatalf("zombie_holder findings = %+v, want one for the tenure", findings)
	}
	if z := findings[0]; !z.At.Equal(now.Add(-9*time.Minute)) || !z.Until.Equal(now.Add(-8*time.Minute)) ||
		!strings.Contains(z.Summary, "worker-1") || z.Severity != audit.SeverityWarning {
		t.Fatalf("zombie_holder = %+v, want from the release (now-9m) to the first zombie belief, warning", z)
	}

	_, body := f.do(t, http.MethodGet, "/metrics", nil)
	if !strings.Contains(string(body), "leasewatch_ingest_beliefs_total 4") {
		t.Errorf("metrics do not count the 4 beliefs:\n%s", grepLines(body, "beliefs"))
	}
}

func TestBeliefsInvalid(t *testing.T) {
	f := newFixture(t)
	f.handOverJobs(t)
	zombie := `{"source":"prod-etcd","lock":"/locks/jobs","holder":"worker-1","token":41}`
	if res, m := f.postTo(t, "/api/v1/beliefs", zombie, ""); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without a token = %d %v, want 401", res.StatusCode, m)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"NotJSON", `{"source":`, "body: invalid JSON"},
		{"EmptyArray", `[]`, "beliefs: empty array; want at least one belief"},
		{"ArrayOfScalars", `[1]`, "beliefs[0]: must be a belief object"},
		{"MissingToken", `{"source":"prod-etcd","lock":"/locks/jobs","holder":"worker-1"}`, "token: required"},
		{"NullToken", `{"source":"prod-etcd","lock":"/locks/jobs","token":null}`, "token: required"},
		{"NegativeToken", `{"source":"prod-etcd","lock":"/locks/jobs","token":-1}`, "token: must not be negative"},
		{"MissingSource", `{"lock":"/locks/jobs","token":41}`, "source: required"},
		{"UnknownSource", `{"source":"staging","lock":"/locks/jobs","token":41}`, `source: unknown source "staging"`},
		{"MissingLock", `{"source":"prod-etcd","token":41}`, "lock: required"},
		{"WriteField", `{"source":"prod-etcd","lock":"/locks/jobs","token":41,"outcome":"accepted"}`, "outcome: unknown field"},
		{"Duplicate", `{"source":"prod-etcd","lock":"/locks/jobs","token":41,"token":42}`, "token: duplicate field"},
		{"BadAt", `{"source":"prod-etcd","lock":"/locks/jobs","token":41,"at":"yesterday"}`, "at: must be an RFC 3339 time"},
		{"FutureAt", `{"source":"prod-etcd","lock":"/locks/jobs","token":41,"at":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`,
			"at: must not be more than"},
		{"InvalidUTF8", "{\"source\":\"prod-etcd\",\"lock\":\"/locks/orders\",\"holder\":\"w\xff\",\"token\":41}", "holder: must be valid UTF-8"},
		// A valid zombie belief before a bad one: nothing of the request is judged.
		{"SecondOfArray", `[` + zombie + `,{"source":"prod-etcd","lock":"/locks/jobs","token":"41"}]`,
			"beliefs[1].token: must be an integer or null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, m := f.postTo(t, "/api/v1/beliefs", tc.body, bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST = %d %v, want 400", res.StatusCode, m)
			}
			wantError(t, m, tc.want)
		})
	}
	if events, findings := f.zombieRecords(t); len(events)+len(findings) != 0 {
		t.Fatalf("refused requests recorded %+v %+v", events, findings)
	}
}
