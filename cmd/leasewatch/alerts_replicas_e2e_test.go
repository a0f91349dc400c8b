package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/alert/alertmanagertest"
)

// replicaResend is how often the replicas of the alert tests re-send firing
// alerts: Alertmanager resolves an alert by itself 4 of them after the last
// send, so a takeover (replicaTakeoverBound) that did not send the alert
// again would show within the test.
const replicaResend = 3 * time.Second

// replicaAlertsConfig is the alerts section of replica identity: a real
// Alertmanager, and an external URL of the replica's own, which Alertmanager
// keeps as the generatorURL of the copy it received last: it says which
// replica sent it.
func replicaAlertsConfig(amURL, identity string) string {
	return fmt.Sprintf(`alerts:
  alertmanager:
    urls: [%q]
    external_url: %q
    resend_every: %s
`, amURL, replicaExternalURL(identity), replicaResend)
}

func replicaExternalURL(identity string) string { return "http://" + identity + ".leasewatch.test" }

// alertWatch polls Alertmanager for one alert and keeps what every poll saw.
type alertWatch struct {
	am     *alertmanagertest.Alertmanager
	labels map[string]string // the alert's identity (a subset of its labels)

	mu       sync.Mutex
	problems []string
	from     string // the generatorURL of the last poll
	polls    int
}

// watchAlert polls am every 100 ms until the test ends; every poll must see
// exactly one firing alert with those labels.
func watchAlert(t *testing.T, am *alertmanagertest.Alertmanager, labels map[string]string) *alertWatch {
	w := &alertWatch{am: am, labels: labels}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.poll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *alertWatch) poll(ctx context.Context) {
	alerts, err := w.am.Alerts(ctx)
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if err != nil {
		w.problems = append(w.problems, fmt.Sprintf("%s: read alerts: %v", time.Now().Format("15:04:05.000"), err))
		return
	}
	var matching []alertmanagertest.Alert
	for _, a := range alerts {
		match := true
		for k, v := range w.labels {
			match = match && a.Labels[k] == v
		}
		if match {
			matching = append(matching, a)
		}
	}
	if len(matching) != 1 || matching[0].Status.State != "active" {
		w.problems = append(w.problems, fmt.Sprintf("%s: %d alerts with labels %v (%+v), want exactly one, active",
			time.Now().Format("15:04:05.000"), len(matching), w.labels, matching))
		return
	}
	w.from = matching[0].GeneratorURL
}

// check fails the test with every problem the polls saw so far.
func (w *alertWatch) check(t *testing.T, when string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) > 0 {
		t.Fatalf("%s: Alertmanager did not show the alert firing throughout (%d of %d polls):\n%s\n%s",
			when, len(w.problems), w.polls, strings.Join(w.problems[:min(len(w.problems), 10)], "\n"), w.am.Log())
	}
}

// sender is the generatorURL of the alert's latest copy.
func (w *alertWatch) sender() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.from
}

// sentBy reports whether the alert's latest copy came from identity.
func (w *alertWatch) sentBy(identity string) bool {
	return strings.HasPrefix(w.sender(), replicaExternalURL(identity)+"/")
}

// alertsSent returns the replica's count of alerts Alertmanager accepted.
func alertsSent(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "leasewatch_alertmanager_alerts_sent_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("leasewatch_alertmanager_alerts_sent_total %q: %v", v, err)
			}
			return int(n)
		}
	}
	t.Fatalf("%s/metrics has no leasewatch_alertmanager_alerts_sent_total", base)
	return 0
}

// An alert is sent by the owner of its source, and goes on firing, once,
// across a takeover: a lease lost on alpha fires LeaseLost at alpha's owner;
// a standby whose tracker holds a stale picture of alpha (it started after
// the locks) sends nothing; after a kill -9 of the owner, and then after a
// clean handover back, Alertmanager shows the one alert firing throughout,
// sent by each new owner in turn, never resolved.
func TestReplicaAlertsFollowTheOwner(t *testing.T) {
	database := pg.Get(t).Database(t)
	etcdSrv, cli := startEtcd(t)
	am := alertmanagertest.Start(t)
	identity := []string{"replica-0", "replica-1"}
	config := make([]string, 2)
	for i, id := range identity {
		config[i] = writeReplicaConfig(t, database, etcdSrv.Endpoint, id, replicaAlertsConfig(am.URL, id))
		// beta doubles as leasewatch's own source (a configured source of
		// its name is used as it is), so that the replicas share the two
		// sources this test moves between them, one each.
		setOwnSource(t, config[i], "beta")
	}
	procs, bases := make([]*serveProcess, 2), make([]string, 2)
	start := func(i int) {
		procs[i] = startServeProcess(t, config[i])
		bases[i] = procs[i].waitListening(t, time.Minute)
	}
	start(0)
	start(1)
	split := func(what string, alphaOn int) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() bool {
			up, clean := owners(t, bases)
			return clean && slices1(up["alpha"], alphaOn) && slices1(up["beta"], 1-alphaOn)
		})
	}
	var x int // alpha's owner
	eventually(t, 30*time.Second, "one source up on each replica", func() bool {
		up, clean := owners(t, bases)
		if clean && len(up["alpha"]) == 1 && len(up["beta"]) == 1 && up["alpha"][0] != up["beta"][0] {
			x = up["alpha"][0]
			return true
		}
		return false
	})
	y := 1 - x

	// A lock whose holder goes away without releasing it (its session's
	// keep-alive stops), and one held throughout.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	heldSess, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer heldSess.Close()
	if err := concurrency.NewMutex(heldSess, "/locks/alpha/held").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lostSess, err := concurrency.NewSession(cli, concurrency.WithTTL(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewMutex(lostSess, "/locks/alpha/lost").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lostSess.Orphan()
	lost := map[string]string{alert.LabelAlertName: alert.LeaseLost, alert.LabelSource: "alpha", alert.LabelLock: "/locks/alpha/lost"}
	eventually(t, 30*time.Second, "LeaseLost for /locks/alpha/lost in Alertmanager", func() bool {
		alerts, err := am.Alerts(ctx)
		if err != nil {
			t.Fatalf("read alerts: %v\n%s", err, am.Log())
		}
		for _, a := range alerts {
			if a.Labels[alert.LabelAlertName] == alert.LeaseLost && a.Labels[alert.LabelLock] == lost[alert.LabelLock] {
				return true
			}
		}
		return false
	})
	w := watchAlert(t, am, lost)
	eventually(t, 10*time.Second, "the alert to come from alpha's owner", func() bool { return w.sentBy(identity[x]) })

	// Restart y, so that its tracker starts with alpha's locks as stored;
	// x runs both sources meanwhile, then gives beta, its latest grant, back.
	procs[y].kill()
	eventually(t, replicaTakeoverBound, "alpha's owner to run both sources", func() bool {
		states := sourceStates(t, bases[x])
		return states["alpha"] == "up" && states["beta"] == "up"
	})
	start(y)
	restarted := time.Now()
	split("beta back on the restarted replica", x)
	// The standby's stale copy of /locks/alpha/held runs out within its 5 s
	// lease: a standby that evaluated alpha would send an alert for it. A
	// negative can only be watched for a while: two of those leases.
	time.Sleep(time.Until(restarted.Add(10 * time.Second)))
	if n := alertsSent(t, bases[y]); n != 0 {
		t.Fatalf("the standby of alpha, which owns only beta (no alerts), had Alertmanager accept %d alerts", n)
	}
	w.check(t, "with a standby")
	if !w.sentBy(identity[x]) {
		t.Fatalf("the alert's latest copy came from %q, not from alpha's owner %s", w.sender(), identity[x])
	}

	// kill -9 alpha's owner: y takes it over and sends the alert itself.
	procs[x].kill()
	killed := time.Now()
	eventually(t, replicaTakeoverBound+replicaResend, "the new owner to send the alert", func() bool { return w.sentBy(identity[y]) })
	t.Logf("after kill -9: the new owner sent the alert %s after the kill", time.Since(killed).Round(time.Millisecond))
	// The watch goes on polling past the time the dead owner's last copy
	// would have lasted.
	time.Sleep(time.Until(killed.Add(4*replicaResend + time.Second)))
	w.check(t, "across the kill -9")

	// x comes back; y hands alpha (its latest grant) over to it, cleanly.
	start(x)
	split("alpha handed back to the restarted replica", x)
	handedOver := time.Now()
	eventually(t, 2*replicaResend, "the new owner to send the alert", func() bool { return w.sentBy(identity[x]) })
	time.Sleep(time.Until(handedOver.Add(4*replicaResend + time.Second))) // the watch polls meanwhile
	w.check(t, "across the handover")
	if !w.sentBy(identity[x]) {
		t.Fatalf("after the handover, the alert's latest copy came from %q, not from alpha's owner %s", w.sender(), identity[x])
	}
}

// slices1 reports whether s is exactly [i].
func slices1(s []int, i int) bool { return len(s) == 1 && s[0] == i }

// setOwnSource makes the configuration at path name source as leasewatch's
// own (replication.source).
func setOwnSource(t *testing.T, path, source string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), "\nreplication:\n", "\nreplication:\n  source: "+source+"\n", 1)
	if out == string(data) {
		t.Fatalf("%s has no replication section", path)
	}
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}
