package zookeeper

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// python is Debian's interpreter, which python3-kazoo installs for.
const python = "/usr/bin/python3"

// needKazoo skips the test when kazoo is not installed, and fails it under
// CI=true.
func needKazoo(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import kazoo").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("kazoo is not installed for %s: install Debian's python3-kazoo (make install-zookeeper): %v %s", python, err, out)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// kazooStep is one line of testdata/kazoo_recipes.py: a holder's own
// account of an acquisition or a release.
type kazooStep struct {
	Event      string `json:"event"` // acquired or released
	Lock       string `json:"lock"`
	Identifier string `json:"identifier"`
	Session    string `json:"session"`
	Node       string `json:"node"`
	Czxid      int64  `json:"czxid"`
	Shared     bool   `json:"shared"` // a reader that holds with the one before it
}

func (s kazooStep) holder() string { return s.Session + " " + s.Identifier }

// kazoo's Lock, Election and ReadLock/WriteLock, run by the real kazoo:
// every holder the script reports is recorded with its session and
// identifier as holder and its node's czxid as token, in the order they
// held, with no overlap; two readers holding together are recorded as the
// first, then the second once the first has gone, and the writer queued
// behind them after both.
func TestKazooRecipes(t *testing.T) {
	needKazoo(t)
	a := connect(t, 4*time.Second)
	base := unique("/t-kazoo")
	mkdirs(t, a, base)
	sk := newSink(t)
	runCollector(t, testConfig(t, base), sk)

	steps := runKazoo(t, base, func(s kazooStep) {
		switch {
		case s.Event == "acquired" && !s.Shared:
			if ev := waitToken(t, sk, s, audit.EventGrant); ev.Holder != s.holder() {
				t.Errorf("%s: grant to %q, want %q", s.Lock, ev.Holder, s.holder())
			}
		case s.Event == "released":
			if ev := waitToken(t, sk, s, audit.EventRelease, audit.EventExpire); ev.Holder != s.holder() {
				t.Errorf("%s: end of %q, want %q", s.Lock, ev.Holder, s.holder())
			}
		}
	})
	for _, lock := range []string{base + "/mutex", base + "/election", base + "/rw"} {
		var want []string
		for _, s := range steps {
			if s.Lock == lock && s.Event == "acquired" {
				want = append(want, fmt.Sprintf("%s %d", s.holder(), s.Czxid))
			}
		}
		grants := sk.Events(t, lock, audit.EventGrant)
		var got []string
		for _, g := range grants {
			got = append(got, fmt.Sprintf("%s %d", g.Holder, *g.Token))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: grants %q, want %q (the holders' own accounts)", lock, got, want)
		}
		sk.NoFindings(t, lock, audit.FindingOverlap, audit.FindingTokenRegression)
	}
}

// runKazoo runs testdata/kazoo_recipes.py against the test server under
// base, hands each step to check before letting the script go on, and
// returns the steps.
func runKazoo(t *testing.T, base string, check func(kazooStep)) []kazooStep {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/kazoo_recipes.py", need(t).Addr, base)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var steps []kazooStep
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		var s kazooStep
		if err := json.Unmarshal(lines.Bytes(), &s); err != nil {
			t.Fatalf("script said %q: %v", lines.Text(), err)
		}
		t.Logf("%s %s %s (%s, czxid %d)", s.Identifier, s.Event, s.Lock, s.Node, s.Czxid)
		steps = append(steps, s)
		check(s)
		if _, err := io.WriteString(stdin, "ok\n"); err != nil {
			t.Fatal(err)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kazoo_recipes.py: %v\n%s", err, stderr.String())
	}
	if len(steps) != 14 {
		t.Fatalf("%d steps, want 14 (2 acquisitions and 2 releases by Lock and by Election, 3 and 3 by ReadLock and WriteLock)", len(steps))
	}
	return steps
}

// waitToken polls the store for the event of s's lock with s's czxid as
// token, of one of kinds.
func waitToken(t *testing.T, sk *collectortest.Sink, s kazooStep, kinds ...audit.EventKind) audit.Event {
	t.Helper()
	var found audit.Event
	collectortest.Eventually(t, 5*time.Second, fmt.Sprintf("%v of %s with token %d", kinds, s.Lock, s.Czxid), func() bool {
		for _, ev := range sk.Events(t, s.Lock, kinds...) {
			if ev.Token != nil && *ev.Token == s.Czxid {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}
