package postgres

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// quartzJars are Debian's Quartz (libquartz2-java, 2.3.2), its PostgreSQL
// JDBC driver (libpostgresql-jdbc-java) and what Quartz needs at run time
// with them: the HikariCP pool its "hikaricp" provider uses and SLF4J
// (libquartz2-java's dependencies).
var quartzJars = []string{"quartz2.jar", "postgresql.jar", "HikariCP.jar", "slf4j-api.jar", "slf4j-simple.jar"}

// quartzDir is where Debian installs them.
const quartzDir = "/usr/share/java"

// needQuartz returns the classpath of quartzJars. It skips the test when
// java, javac or a jar is missing, and fails it under CI=true.
func needQuartz(t *testing.T) string {
	t.Helper()
	var missing []string
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	var cp []string
	for _, jar := range quartzJars {
		p := filepath.Join(quartzDir, jar)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
		cp = append(cp, p)
	}
	if len(missing) == 0 {
		return strings.Join(cp, string(os.PathListSeparator))
	}
	msg := fmt.Sprintf("Quartz's test needs %s: install Debian's libquartz2-java, libpostgresql-jdbc-java and default-jdk-headless (make install-quartz)", strings.Join(missing, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// quartzDDL is Quartz's own PostgreSQL schema, as its jar ships it.
func quartzDDL(t *testing.T) string {
	t.Helper()
	const name = "org/quartz/impl/jdbcjobstore/tables_postgres.sql"
	z, err := zip.OpenReader(filepath.Join(quartzDir, "quartz2.jar"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	f, err := z.Open(name)
	if err != nil {
		t.Fatalf("%s in quartz2.jar: %v", name, err)
	}
	defer f.Close()
	ddl, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(ddl)
}

// compileQuartzNode starts compiling testdata/quartz/QuartzNode.java into
// a directory of the test's, while the test sets up the rest, and returns
// what waits for javac to finish and returns that directory.
func compileQuartzNode(t *testing.T, classpath string) func() string {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	// javac on the client VM, without looking for annotation processors:
	// half the time on a busy machine.
	cmd := exec.Command("javac", "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-proc:none", "-implicit:none",
		"-cp", classpath, "-d", dir, "testdata/quartz/QuartzNode.java")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("javac: %v", err)
	}
	wait := sync.OnceValue(cmd.Wait)
	t.Cleanup(func() { cmd.Process.Kill(); wait() })
	return func() string {
		t.Helper()
		if err := wait(); err != nil {
			t.Fatalf("javac QuartzNode.java: %v\n%s", err, out.String())
		}
		return dir
	}
}

// quartzLine is a line QuartzNode prints: the scheduler started, or one of
// its job's runs started or ended. Times are the JVM's, in epoch
// milliseconds.
type quartzLine struct {
	Event             string `json:"event"` // started, start or end
	Instance          string `json:"instance"`
	At                int64  `json:"at"`
	Fire              string `json:"fire"` // the fire's entry_id in qrtz_fired_triggers
	Trigger           string `json:"trigger"`
	Scheduled         int64  `json:"scheduled"`
	Recovering        bool   `json:"recovering"`
	OriginalScheduled int64  `json:"original_scheduled"` // a recovered fire's, of the fire it re-runs
}

// quartzNode is one running QuartzNode: a scheduler instance of the
// cluster.
type quartzNode struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited

	mu    sync.Mutex
	lines []quartzLine
	log   bytes.Buffer // its stderr: Quartz's log
}

// quartzCluster is what starts QuartzNodes on one database.
type quartzCluster struct {
	jars     string        // quartzJars' classpath
	compiled func() string // waits for QuartzNode's classes
	jdbc     string
	user     string
	password string
}

// newQuartzCluster returns what starts QuartzNodes on the database at
// dbURL (the superuser's), with the classes compiled will give and jars.
func newQuartzCluster(t *testing.T, dbURL, jars string, compiled func() string) *quartzCluster {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	return &quartzCluster{
		jars:     jars,
		compiled: compiled,
		jdbc:     "jdbc:postgresql://" + u.Host + u.Path,
		user:     u.User.Username(),
		password: pw,
	}
}

// start starts scheduler instance id, holding each run of the job for
// hold, and waits until its scheduler has started.
func (qc *quartzCluster) start(t *testing.T, id string, hold time.Duration) *quartzNode {
	t.Helper()
	n := &quartzNode{id: id, done: make(chan struct{})}
	classpath := qc.compiled() + string(os.PathListSeparator) + qc.jars
	// The client VM and serial GC: a quick start on a busy machine.
	n.cmd = exec.Command("java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", classpath, "QuartzNode",
		qc.jdbc, qc.user, qc.password, id, "500", fmt.Sprint(hold.Milliseconds()))
	n.cmd.Stderr = lockedWriter{&n.mu, &n.log}
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start QuartzNode %s: %v", id, err)
	}
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l quartzLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				l = quartzLine{Event: "unreadable: " + sc.Text()}
			}
			n.mu.Lock()
			n.lines = append(n.lines, l)
			n.mu.Unlock()
		}
		n.cmd.Wait()
	}()
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		<-n.done
		if t.Failed() {
			n.mu.Lock()
			t.Logf("QuartzNode %s printed %+v; its log:\n%s", id, n.lines, n.log.String())
			n.mu.Unlock()
		}
	})
	n.wait(t, "started", func(l quartzLine) bool { return l.Event == "started" })
	return n
}

// wait waits for a line of the node's that meets cond and returns the
// first.
func (n *quartzNode) wait(t *testing.T, what string, cond func(quartzLine) bool) quartzLine {
	t.Helper()
	var got quartzLine
	collectortest.Eventually(t, 30*time.Second, n.id+": "+what, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, l := range n.lines {
			if cond(l) {
				got = l
				return true
			}
		}
		select {
		case <-n.done:
			t.Fatalf("QuartzNode %s exited, waiting for %s", n.id, what)
		default:
		}
		return false
	})
	return got
}

// runs returns the node's lines of event.
func (n *quartzNode) runs(event string) []quartzLine {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []quartzLine
	for _, l := range n.lines {
		if l.Event == event {
			out = append(out, l)
		}
	}
	return out
}

// kill kills the node's JVM with SIGKILL, as a crash or the OOM killer
// would, and waits until it has exited.
func (n *quartzNode) kill(t *testing.T) time.Time {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.done
	return time.Now()
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The locks of the test's cluster, scheduler "leasewatch": each instance's
// check-ins and job nightly.report.
const (
	quartzStateA = "qrtz_scheduler_state/leasewatch/node-a"
	quartzStateB = "qrtz_scheduler_state/leasewatch/node-b"
	quartzJob    = "qrtz_fired_triggers/leasewatch/nightly/report"
)

// quartzLease is a check-in's lease by the qrtz_scheduler_state preset:
// QuartzNode's clusterCheckinInterval, 500 ms, and the 7.5 s Quartz's
// JobStoreSupport.calcFailedIfAfter adds before a peer counts an instance
// failed.
const quartzLease = 500*time.Millisecond + 7500*time.Millisecond

// TestQuartzClusterRecovery: two instances of a clustered Quartz 2.3.2
// scheduler (JobStoreTX, check-ins every 500 ms) share a job that disallows
// concurrent execution and requests recovery. Node-a runs it and is killed
// with SIGKILL mid-run; node-b finds it failed 8 s after its last check-in
// and re-runs its fire. Both Quartz presets, streamed, record node-a's
// check-ins as renewals of a lease that expires (it is never released),
// node-b's going on, and the job held by node-a until node-b's recovery
// deletes node-a's fired trigger, then by node-b for the re-run: two
// tenures one after the other, no overlap.
func TestQuartzClusterRecovery(t *testing.T) {
	qc, sink := watchQuartz(t, "quartz cluster")
	a := qc.start(t, "node-a", time.Minute)
	first := a.wait(t, "its first run", func(l quartzLine) bool { return l.Event == "start" })
	b := qc.start(t, "node-b", time.Minute)
	sink.WaitEvents(t, 10*time.Second, quartzStateA, 2, audit.EventRenew)
	sink.WaitEvents(t, 10*time.Second, quartzStateB, 1, audit.EventRenew)
	killed := a.kill(t)
	rerun := b.wait(t, "node-a's fire re-run", func(l quartzLine) bool { return l.Event == "start" && l.Recovering })
	t.Logf("node-b re-ran node-a's fire %s after the kill", time.UnixMilli(rerun.At).Sub(killed).Round(time.Millisecond))

	// Quartz's own account: node-a never finished its run; node-b ran
	// nothing before the re-run (the job was node-a's), and re-ran the
	// fire node-a had been running.
	switch bs := b.runs("start"); {
	case len(a.runs("end")) != 0:
		t.Errorf("node-a ended a run: %+v; it was killed in its first", a.runs("end"))
	case bs[0] != rerun:
		t.Errorf("node-b's first run %+v, want the re-run of node-a's", bs[0])
	case rerun.OriginalScheduled != first.Scheduled || rerun.Scheduled != first.Scheduled:
		t.Errorf("node-b re-ran %+v; want node-a's fire scheduled at %d", rerun, first.Scheduled)
	}
	expired := checkFailedCheckins(t, sink, killed)
	checkRecoveredJob(t, sink, expired, rerun)
}

// watchQuartz compiles QuartzNode, creates Quartz's tables in a database
// of the test's own and the operator's publication of both Quartz
// presets' tables, and runs a collector named source of them, streamed, on
// a sink it returns.
func watchQuartz(t *testing.T, source string) (*quartzCluster, *collectortest.Sink) {
	t.Helper()
	jars := needQuartz(t)
	compiled := compileQuartzNode(t, jars) // while the rest is set up
	srv := shared(t)
	db := database(t, srv)
	qc := newQuartzCluster(t, srv.URL(db), jars, compiled)
	admin(t, srv, db, quartzDDL(t))
	admin(t, srv, "postgres", "ALTER ROLE "+watcher+" REPLICATION")
	admin(t, srv, db, "GRANT SELECT ON qrtz_scheduler_state, qrtz_fired_triggers TO "+watcher)
	admin(t, srv, db, "CREATE PUBLICATION "+SlotName(source)+" FOR TABLE qrtz_scheduler_state, qrtz_fired_triggers")
	state, _ := LookupPreset("qrtz_scheduler_state")
	fired, _ := LookupPreset("qrtz_fired_triggers")
	c, err := New(Config{Name: source, URL: watchURL(srv, db), PollEvery: 100 * time.Millisecond,
		Password: collectors.Password(watcherPassword), NoAdvisory: true,
		Tables: []Table{{Mapping: state.Mapping}, {Mapping: fired.Mapping}}}, collectortest.Logger(t, source))
	if err != nil {
		t.Fatal(err)
	}
	sink := collectortest.NewSink(t, source, Backend.Kind)
	collectortest.Run(t, c, sink)
	return qc, sink
}

// checkFailedCheckins checks the scheduler instances' check-ins: node-a's
// renewed every 500 ms until the kill, its lease expiring quartzLease after
// its last check-in, with a lease_expired finding, and never released;
// node-b's renewed throughout. It returns node-a's expiry.
func checkFailedCheckins(t *testing.T, sink *collectortest.Sink, killed time.Time) audit.Event {
	t.Helper()
	ends := sink.WaitEvents(t, 15*time.Second, quartzStateA, 1, audit.EventExpire, audit.EventRelease)
	evs := sink.Events(t, quartzStateA)
	kinds := collectortest.Kinds(evs)
	renews := sink.Obs(quartzStateA, audit.EventRenew)
	switch {
	case len(ends) != 1 || ends[0].Kind != audit.EventExpire || ends[0].Holder != "node-a":
		t.Fatalf("node-a's check-ins ended by %v %v; want one expiry of node-a's (killed, it never released)", collectortest.Kinds(ends), collectortest.Holders(ends))
	case len(renews) < 2 || kinds[0] != audit.EventGrant || kinds[len(kinds)-1] != audit.EventExpire:
		t.Fatalf("node-a's check-ins: %v; want a grant, renewals, an expiry", kinds)
	case evs[0].TTL != quartzLease:
		t.Errorf("node-a's check-in lease %s, want %s (checkin_interval + 7.5 s)", evs[0].TTL, quartzLease)
	}
	last := renews[len(renews)-1]
	if want := last.RenewedAt.Add(quartzLease); ends[0].At.Before(killed) || ends[0].At.Sub(want).Abs() > 50*time.Millisecond {
		t.Errorf("node-a's lease expired at %s; want %s after its last check-in (%s), after the kill (%s)",
			ends[0].At.Format(time.StampMilli), quartzLease, last.RenewedAt.Format(time.StampMilli), killed.Format(time.StampMilli))
	}
	if len(sink.Findings(t, quartzStateA, audit.FindingLeaseExpired)) != 1 {
		t.Errorf("findings on node-a's check-ins: %+v; want one lease_expired", sink.Findings(t, quartzStateA))
	}
	b := sink.Events(t, quartzStateB)
	kb := collectortest.Kinds(b)
	if kb[0] != audit.EventGrant || slices.Contains(kb, audit.EventRelease) || slices.Contains(kb, audit.EventExpire) || !b[len(b)-1].At.After(ends[0].At) {
		t.Errorf("node-b's check-ins: %v, the last at %s; want a grant and renewals past node-a's expiry (%s), no end",
			kb, b[len(b)-1].At.Format(time.StampMilli), ends[0].At.Format(time.StampMilli))
	}
	return ends[0]
}

// checkRecoveredJob checks the job's lock: held by node-a from its run's
// start until node-b's recovery deleted node-a's fired trigger, after
// node-a's check-ins expired; then by node-b for the re-run, then again
// for the trigger's next fire. Never by two at once.
func checkRecoveredJob(t *testing.T, sink *collectortest.Sink, expired audit.Event, rerun quartzLine) {
	t.Helper()
	var (
		evs []audit.Event
		got []string
	)
	defer func() {
		if t.Failed() {
			t.Logf("%s's events: %v", quartzJob, got)
		}
	}()
	collectortest.Eventually(t, 10*time.Second, "node-b's second run of "+quartzJob, func() bool {
		evs, got = sink.Events(t, quartzJob), got[:0]
		for _, e := range evs {
			got = append(got, string(e.Kind)+" "+e.Holder)
		}
		return len(got) >= 5
	})
	// The tracker ends a tenure without a lease that another holder's
	// grant finds still held as superseded, with no finding: each of the
	// job's tenures must have ended by its own row first.
	for _, e := range evs {
		if by, ok := e.Detail["superseded"]; ok {
			t.Errorf("%s's grant to %s at %s superseded %v's tenure: two runs at once", quartzJob, e.Holder, e.At.Format(time.StampMilli), by)
		}
	}
	want := []string{"grant node-a", "release node-a", "grant node-b", "release node-b", "grant node-b"}
	if !slices.Equal(got[:5], want) {
		t.Fatalf("%s's events: %v; want %v first", quartzJob, got, want)
	}
	switch recovered, regrant := evs[1], evs[2]; {
	case recovered.Detail["row_deleted"] != true || recovered.At.Before(expired.At):
		t.Errorf("node-a's hold of the job ended %s %v; want its fired trigger deleted after its check-ins expired (%s)",
			recovered.At.Format(time.StampMilli), recovered.Detail, expired.At.Format(time.StampMilli))
	case regrant.At.Sub(time.UnixMilli(rerun.At)).Abs() > time.Second:
		t.Errorf("node-b granted the job at %s; its re-run started at %s", regrant.At.Format(time.StampMilli), time.UnixMilli(rerun.At).Format(time.StampMilli))
	}
	// Quartz recovers in its check-in's transaction: node-a's check-in row
	// and its fired trigger go in one commit.
	position := func(lock string) (lsns []string) {
		for _, ob := range sink.Obs(lock, audit.EventRelease, audit.EventExpire) {
			if ob.Holder == "node-a" {
				lsns = append(lsns, ob.Position)
			}
		}
		return lsns
	}
	if state, job := position(quartzStateA), position(quartzJob); len(job) != 1 || !slices.Equal(state, job) {
		t.Errorf("node-a's check-in row deleted at LSN %v, its fired trigger at %v; want one transaction", state, job)
	}
	t.Logf("node-a's lease expired %s after its last check-in; node-b recovered its fire %s after that",
		quartzLease, evs[1].At.Sub(expired.At).Round(time.Millisecond))
}
