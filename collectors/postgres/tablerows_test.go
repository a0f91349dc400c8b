package postgres

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// t0 is when the stories start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// at is t0 plus d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// step is one row change of a story and the observations it must give,
// each as describe writes it.
type step struct {
	name string
	c    Change
	want []string
}

// describe writes an observation on one line: kind, lock, holder, and
// what is set of token, lease, renewal time, position, class and detail.
func describe(ob audit.Observation) string {
	s := fmt.Sprintf("%s %s %s", ob.Kind, ob.Lock.Name, ob.Holder)
	if ob.Token != nil {
		s += fmt.Sprintf(" token=%d", *ob.Token)
	}
	if ob.LeaseDuration != 0 {
		s += fmt.Sprintf(" lease=%s", ob.LeaseDuration)
	}
	if !ob.RenewedAt.IsZero() {
		s += fmt.Sprintf(" renewed=+%s", ob.RenewedAt.Sub(t0))
	}
	if ob.Position != "" {
		s += " at=" + ob.Position
	}
	if ob.Class != "" {
		s += " class=" + string(ob.Class)
	}
	if ob.Inferred {
		s += " inferred"
	}
	if ob.StillHeld {
		s += " still_held"
	}
	keys := make([]string, 0, len(ob.Detail))
	for k := range ob.Detail {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%v", k, ob.Detail[k])
	}
	return s
}

// runStory applies the steps in order to a preset's rows.
func runStory(t *testing.T, preset string, steps []step) {
	t.Helper()
	p, ok := LookupPreset(preset)
	if !ok {
		t.Fatalf("no preset %q", preset)
	}
	rows, err := NewRows(p.Mapping)
	if err != nil {
		t.Fatalf("NewRows(%s): %v", preset, err)
	}
	for _, s := range steps {
		obs, err := rows.Apply(s.c)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := make([]string, 0, len(obs))
		for _, ob := range obs {
			if !ob.At.Equal(s.c.At) {
				t.Errorf("%s: At = %s, want the change's %s", s.name, ob.At, s.c.At)
			}
			got = append(got, describe(ob))
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("%s:\n got %s\nwant %s", s.name, strings.Join(got, "\n     "), strings.Join(s.want, "\n     "))
		}
	}
}

// shedlock is a shedlock row.
func shedlock(name, by string, lockedAt, until time.Duration) Row {
	return Row{"name": name, "locked_by": by, "locked_at": at(lockedAt), "lock_until": at(until)}
}

func TestRowsShedLock(t *testing.T) {
	key := Row{"name": "report"}
	t.Run("GrantExtendUnlockTakeover", func(t *testing.T) {
		runStory(t, "shedlock", []step{
			{"A inserts the row", Change{New: shedlock("report", "a", 0, 10*time.Minute), At: at(0), LSN: 0x100},
				[]string{"grant shedlock/report a token=256 lease=10m0s renewed=+0s at=0/100"}},
			{"A extends: the grant's token, not this commit's", Change{Old: key, New: shedlock("report", "a", 0, 20*time.Minute), At: at(time.Minute), LSN: 0x200},
				[]string{"renew shedlock/report a token=256 lease=19m0s at=0/200"}},
			{"A unlocks: lock_until = now", Change{Old: key, New: shedlock("report", "a", 0, 2*time.Minute), At: at(2 * time.Minute), LSN: 0x300},
				[]string{"release shedlock/report a token=256 at=0/300"}},
			{"B takes the free row", Change{Old: key, New: shedlock("report", "b", 3*time.Minute, 13*time.Minute), At: at(3 * time.Minute), LSN: 0x400},
				[]string{"grant shedlock/report b token=1024 lease=10m0s renewed=+3m0s at=0/400"}},
			{"C takes it after B's lease ran out: the tracker ends B's", Change{Old: key, New: shedlock("report", "c", 14*time.Minute, 24*time.Minute), At: at(14 * time.Minute), LSN: 0x500},
				[]string{"grant shedlock/report c token=1280 lease=10m0s renewed=+14m0s at=0/500"}},
			{"C takes it again after its own ran out: its tenure ends first", Change{Old: key, New: shedlock("report", "c", 25*time.Minute, 35*time.Minute), At: at(25 * time.Minute), LSN: 0x600},
				[]string{"expire shedlock/report c token=1280 at=0/600", "grant shedlock/report c token=1536 lease=10m0s renewed=+25m0s at=0/600"}},
		})
	})
	t.Run("UnlockUnderLockAtLeastFor", func(t *testing.T) {
		runStory(t, "shedlock", []step{
			{"A inserts the row", Change{New: shedlock("report", "a", 0, 10*time.Minute), At: at(0), LSN: 0x100},
				[]string{"grant shedlock/report a token=256 lease=10m0s renewed=+0s at=0/100"}},
			{"A unlocks early: lock_until = locked_at + lockAtLeastFor, still ahead", Change{Old: key, New: shedlock("report", "a", 0, 5*time.Minute), At: at(time.Minute), LSN: 0x200},
				[]string{"renew shedlock/report a token=256 lease=4m0s at=0/200 shortened=true"}},
		})
	})
	t.Run("SnapshotObservesHeldRowsOnly", func(t *testing.T) {
		runStory(t, "shedlock", []step{
			{"held", Change{New: shedlock("report", "a", 0, 10*time.Minute), At: at(time.Minute), LSN: 0x100, Snapshot: true},
				[]string{"observed shedlock/report a token=256 lease=10m0s renewed=+0s at=0/100"}},
			{"run out long ago", Change{New: shedlock("nightly", "a", -time.Hour, -50*time.Minute), At: at(time.Minute), LSN: 0x100, Snapshot: true},
				nil},
		})
	})
}

// riverRow is a river_leader row.
func riverRow(leader string, elected, expires time.Duration) Row {
	return Row{"name": "default", "leader_id": leader, "elected_at": at(elected), "expires_at": at(expires)}
}

func TestRowsRiverPolled(t *testing.T) {
	key := Row{"name": "default"}
	runStory(t, "river_leader", []step{
		{"first read: a leader", Change{New: riverRow("a", 0, 15*time.Second), At: at(time.Second), Snapshot: true},
			[]string{"observed river_leader/default a lease=15s renewed=+0s"}},
		{"re-elected", Change{Old: riverRow("a", 0, 15*time.Second), New: riverRow("a", 0, 20*time.Second), At: at(6 * time.Second)},
			[]string{"renew river_leader/default a lease=14s"}},
		{"unchanged", Change{Old: riverRow("a", 0, 20*time.Second), New: riverRow("a", 0, 20*time.Second), At: at(7 * time.Second)},
			nil},
		{"resigned: the row deleted before it ran out", Change{Old: key, At: at(8 * time.Second)},
			[]string{"release river_leader/default a row_deleted=true"}},
		{"b elected", Change{New: riverRow("b", 9*time.Second, 24*time.Second), At: at(9 * time.Second)},
			[]string{"grant river_leader/default b lease=15s renewed=+9s"}},
		{"b resigned and c was elected between two reads", Change{Old: key, New: riverRow("c", 12*time.Second, 27*time.Second), At: at(12 * time.Second)},
			[]string{"release river_leader/default b inferred", "grant river_leader/default c lease=15s renewed=+12s"}},
		{"c's lease ran out and b was elected between two reads", Change{Old: key, New: riverRow("b", 28*time.Second, 43*time.Second), At: at(29 * time.Second)},
			[]string{"grant river_leader/default b lease=15s renewed=+28s"}},
		{"b elected anew after its lease ran out: no token tells, so its tenure ends here", Change{Old: key, New: riverRow("b", 45*time.Second, 60*time.Second), At: at(46 * time.Second)},
			[]string{"expire river_leader/default b", "grant river_leader/default b lease=15s renewed=+45s"}},
		{"b's expired row deleted by the next election", Change{Old: key, At: at(70 * time.Second)},
			[]string{"expire river_leader/default b row_deleted=true"}},
	})
}

// checkin is a qrtz_scheduler_state row, times in epoch milliseconds.
func checkin(instance string, last time.Duration) Row {
	return Row{"sched_name": "s", "instance_name": instance, "last_checkin_time": at(last).UnixMilli(), "checkin_interval": int64(7500)}
}

func TestRowsQuartzCheckins(t *testing.T) {
	key := Row{"sched_name": "s", "instance_name": "n1"}
	runStory(t, "qrtz_scheduler_state", []step{
		{"first check-in", Change{New: checkin("n1", 0), At: at(0), LSN: 0x10},
			[]string{"grant qrtz_scheduler_state/s/n1 n1 token=16 lease=15s renewed=+0s at=0/10 class=heartbeat"}},
		{"check-in", Change{Old: key, New: checkin("n1", 7500*time.Millisecond), At: at(7500 * time.Millisecond), LSN: 0x20},
			[]string{"renew qrtz_scheduler_state/s/n1 n1 token=16 lease=15s renewed=+7.5s at=0/20 class=heartbeat"}},
		{"recovered by a peer after it failed", Change{Old: key, At: at(40 * time.Second), LSN: 0x30},
			[]string{"expire qrtz_scheduler_state/s/n1 n1 token=16 at=0/30 class=heartbeat row_deleted=true"}},
	})
}

// fired is a qrtz_fired_triggers row of job g.j.
func fired(entry, instance, state string, nonconcurrent bool) Row {
	return Row{"sched_name": "s", "entry_id": entry, "job_group": "g", "job_name": "j", "instance_name": instance,
		"state": state, "is_nonconcurrent": nonconcurrent, "fired_time": at(0).UnixMilli()}
}

func TestRowsQuartzFiredTriggers(t *testing.T) {
	runStory(t, "qrtz_fired_triggers", []step{
		{"acquired, not yet running", Change{New: fired("e1", "n1", "ACQUIRED", true), At: at(0), LSN: 0x10}, nil},
		{"executing", Change{Old: Row{"sched_name": "s", "entry_id": "e1"}, New: fired("e1", "n1", "EXECUTING", true), At: at(time.Second), LSN: 0x20},
			[]string{"grant qrtz_fired_triggers/s/g/j n1 token=32 renewed=+0s at=0/20"}},
		{"a concurrent job's firing is no lock", Change{New: fired("e2", "n2", "EXECUTING", false), At: at(2 * time.Second), LSN: 0x30}, nil},
		{"another instance runs it while n1 still does", Change{New: fired("e3", "n2", "EXECUTING", true), At: at(3 * time.Second), LSN: 0x38},
			[]string{"grant qrtz_fired_triggers/s/g/j n2 token=56 renewed=+0s at=0/38 still_held"}},
		{"done: the delete carries the key only", Change{Old: Row{"sched_name": "s", "entry_id": "e1"}, At: at(time.Hour), LSN: 0x40},
			[]string{"release qrtz_fired_triggers/s/g/j n1 token=32 at=0/40 row_deleted=true"}},
	})
}

// task is a scheduled_tasks row.
func task(by any, picked bool, heartbeat time.Duration, version int64) Row {
	return Row{"task_name": "mail", "task_instance": "1", "picked": picked, "picked_by": by,
		"last_heartbeat": at(heartbeat), "version": version}
}

func TestRowsDbScheduler(t *testing.T) {
	key := Row{"task_name": "mail", "task_instance": "1"}
	runStory(t, "scheduled_tasks", []step{
		{"scheduled, not picked", Change{New: task(nil, false, 0, 1), At: at(0), LSN: 0x10}, nil},
		{"picked by a: version + 1", Change{Old: key, New: task("a", true, 0, 2), At: at(0), LSN: 0x20},
			[]string{"grant scheduled_tasks/mail/1 a token=2 lease=30m0s renewed=+0s at=0/20"}},
		{"heartbeat keeps the version", Change{Old: key, New: task("a", true, 5*time.Minute, 2), At: at(5 * time.Minute), LSN: 0x30},
			[]string{"renew scheduled_tasks/mail/1 a token=2 lease=30m0s renewed=+5m0s at=0/30"}},
		{"rescheduled: picked_by cleared, version + 1", Change{Old: key, New: task(nil, false, 5*time.Minute, 3), At: at(6 * time.Minute), LSN: 0x40},
			[]string{"release scheduled_tasks/mail/1 a token=2 at=0/40"}},
		{"picked by b", Change{Old: key, New: task("b", true, 7*time.Minute, 4), At: at(7 * time.Minute), LSN: 0x50},
			[]string{"grant scheduled_tasks/mail/1 b token=4 lease=30m0s renewed=+7m0s at=0/50"}},
		{"b dead, a picks it again: a new version", Change{Old: key, New: task("a", true, 40*time.Minute, 5), At: at(40 * time.Minute), LSN: 0x60},
			[]string{"grant scheduled_tasks/mail/1 a token=5 lease=30m0s renewed=+40m0s at=0/60"}},
	})
}

// goose is a goose_lock row.
func goose(locked bool, by any, lockedAt, expires time.Duration) Row {
	r := Row{"lock_id": int64(5887940537704921958), "locked": locked, "locked_by": by, "locked_at": nil, "lease_expires_at": nil}
	if locked {
		r["locked_at"], r["lease_expires_at"] = at(lockedAt), at(expires)
	}
	return r
}

func TestRowsGoose(t *testing.T) {
	key := Row{"lock_id": int64(5887940537704921958)}
	runStory(t, "goose_lock", []step{
		{"the row, unlocked", Change{New: goose(false, nil, 0, 0), At: at(0), LSN: 0x10}, nil},
		{"locked", Change{Old: key, New: goose(true, "host-1", 0, 30*time.Second), At: at(0), LSN: 0x20},
			[]string{"grant goose_lock/5887940537704921958 host-1 token=32 lease=30s renewed=+0s at=0/20"}},
		{"heartbeat", Change{Old: key, New: goose(true, "host-1", 0, 35*time.Second), At: at(5 * time.Second), LSN: 0x30},
			[]string{"renew goose_lock/5887940537704921958 host-1 token=32 lease=30s at=0/30"}},
		{"released", Change{Old: key, New: goose(false, nil, 0, 0), At: at(10 * time.Second), LSN: 0x40},
			[]string{"release goose_lock/5887940537704921958 host-1 token=32 at=0/40"}},
	})
}

func TestRowsBadValueChangesNothing(t *testing.T) {
	p, _ := LookupPreset("shedlock")
	rows, err := NewRows(p.Mapping)
	if err != nil {
		t.Fatal(err)
	}
	bad := shedlock("report", "a", 0, 10*time.Minute)
	bad["locked_by"] = int64(7)
	if _, err := rows.Apply(Change{New: bad, At: at(0), LSN: 1}); err == nil || !strings.Contains(err.Error(), "column locked_by") {
		t.Fatalf("Apply with an integer holder: err = %v, want one naming column locked_by", err)
	}
	obs, err := rows.Apply(Change{New: shedlock("report", "a", 0, 10*time.Minute), At: at(0), LSN: 2})
	if err != nil || len(obs) != 1 || obs[0].Kind != audit.EventGrant {
		t.Fatalf("after the bad row, the good one: %v, %v; want a grant", obs, err)
	}
}

func TestRowsKeyUpdateIsDeleteAndInsert(t *testing.T) {
	runStory(t, "shedlock", []step{
		{"grant", Change{New: shedlock("a", "x", 0, time.Minute), At: at(0), LSN: 0x10},
			[]string{"grant shedlock/a x token=16 lease=1m0s renewed=+0s at=0/10"}},
		{"renamed", Change{Old: Row{"name": "a"}, New: shedlock("b", "x", 0, time.Minute), At: at(time.Second), LSN: 0x20},
			[]string{"release shedlock/a x token=16 at=0/20 row_deleted=true", "grant shedlock/b x token=32 lease=1m0s renewed=+0s at=0/20"}},
	})
}

func TestRowsHostileText(t *testing.T) {
	runStory(t, "shedlock", []step{
		{"a name and holder with control bytes", Change{New: shedlock("job\x1b[2J", "host\x00", 0, time.Minute), At: at(0), LSN: 0x10},
			[]string{fmt.Sprintf("grant shedlock/%s %s token=16 lease=1m0s renewed=+0s at=0/10", audit.Text("job\x1b[2J"), audit.Text("host\x00"))}},
	})
}

func TestMappingCheck(t *testing.T) {
	ok := TableMapping{Table: "jobs.locks", Names: []string{"name"}, Holder: "owner", Expires: "until"}
	tests := []struct {
		name string
		edit func(m *TableMapping)
		want string // a prefix of the error; "" for none
	}{
		{"Valid", func(*TableMapping) {}, ""},
		{"NoTable", func(m *TableMapping) { m.Table = "" }, "table: "},
		{"QuotedTable", func(m *TableMapping) { m.Table = `Locks"; drop` }, "table: "},
		{"BadSchema", func(m *TableMapping) { m.Table = "Jobs.locks" }, "table: "},
		{"NoNames", func(m *TableMapping) { m.Names = nil }, "names: "},
		{"NoHolder", func(m *TableMapping) { m.Holder = "" }, "holder: "},
		{"ExpiresAndRenewed", func(m *TableMapping) { m.Renewed = "beat" }, "expires, renewed: "},
		{"DurationWithExpires", func(m *TableMapping) { m.Duration = time.Second }, "duration: "},
		{"RenewedWithoutDuration", func(m *TableMapping) { m.Expires, m.Renewed = "", "beat" }, "duration: "},
		{"NoLease", func(m *TableMapping) { m.Expires = "" }, ""},
		{"BadClock", func(m *TableMapping) { m.Clock = "wall" }, "clock: "},
		{"BadClass", func(m *TableMapping) { m.Class = "mutex" }, "class: "},
		{"BadColumn", func(m *TableMapping) { m.Token = "Version" }, "token: "},
		{"BadHeldIfColumn", func(m *TableMapping) { m.HeldIf = []Match{{"1x", true}} }, "held_if: "},
		{"BadHeldIfValue", func(m *TableMapping) { m.HeldIf = []Match{{"state", 1.5}} }, "held_if: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ok
			m.Names = slices.Clone(ok.Names)
			tt.edit(&m)
			err := m.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Fatalf("Check() = %v, want an error starting %q", err, tt.want)
			}
		})
	}
}

func TestPresets(t *testing.T) {
	// Which way each is watched: River's table is UNLOGGED.
	want := map[string]bool{"goose_lock": true, "qrtz_fired_triggers": true, "qrtz_scheduler_state": true,
		"river_leader": false, "scheduled_tasks": true, "shedlock": true}
	if got := PresetNames(); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("PresetNames() = %v", got)
	}
	for name, publishable := range want {
		p, _ := LookupPreset(name)
		if err := p.Mapping.Check(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
		if p.Publishable != publishable {
			t.Errorf("preset %s: Publishable = %v, want %v", name, p.Publishable, publishable)
		}
	}
	// A caller's edit stays its own.
	p, _ := LookupPreset("shedlock")
	p.Mapping.Names[0] = "other"
	if q, _ := LookupPreset("shedlock"); q.Mapping.Names[0] != "name" {
		t.Fatalf("editing a looked-up preset changed the preset: names = %v", q.Mapping.Names)
	}
	if _, ok := LookupPreset("quartz"); ok {
		t.Fatal(`LookupPreset("quartz") found a preset`)
	}
}
