package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
)

// kubeLoad is the Kubernetes scenario: node heartbeat Leases renewed like
// kubelets do, and leader-election Leases renewed like client-go electors.
type kubeLoad struct {
	heartbeats     int
	heartbeatEvery time.Duration
	elections      int
	electionEvery  time.Duration
	warmup         time.Duration
	duration       time.Duration
	kubeconfig     string
	leasewatch     string
	keep           bool // keep the run's folder (database, config) for inspection
	// replay: the heartbeats are a recorded watch stream of a real
	// apiserver, replayed at the rate asked (replay.go), from frames if set.
	replay bool
	frames string
}

const (
	loadSource      = "load"
	loadElectionsNS = "leasewatch-load"
	heartbeatNS     = "kube-node-lease"
)

// lease is one Lease the load renews: the object last written, and every
// write of the load that the apiserver committed, which is what leasewatch
// must have recorded.
type lease struct {
	mu      sync.Mutex
	name    string                // namespace/name, the lock leasewatch records it as
	created string                // the resourceVersion the Lease was created (or found) at
	obj     *coordinationv1.Lease // nil in a replay
	writes  []leaseWrite
	// unknown counts renewals whose outcome the load could not learn: the
	// Update failed with neither success nor conflict, and reading the
	// Lease back failed too.
	unknown int
}

// leaseWrite is one renewal the apiserver committed.
type leaseWrite struct {
	rv      string    // the Lease's resourceVersion after it
	renewed time.Time // its renewTime
	// deadline is when the Lease ran out before this write: the previous
	// renewTime plus the lease duration. A write at or after it does not
	// renew the tenure, it takes the Lease anew (client-go's slow path keeps
	// leaseTransitions for the same identity): leasewatch records the
	// expiry and a grant.
	deadline time.Time
}

// ranOut reports whether the Lease had run out before w.
func (w leaseWrite) ranOut() bool { return !w.renewed.Before(w.deadline) }

func (k *kubeLoad) run(ctx context.Context, out, log io.Writer) error {
	dir, done, err := runFolder(k.keep, log)
	if err != nil {
		return err
	}
	defer done()
	if k.replay {
		return k.runReplay(ctx, out, log, dir)
	}

	kubeconfig, cs, stopAPI, err := k.connect(ctx, dir, log)
	if err != nil {
		return err
	}
	defer stopAPI()

	// Build leasewatch before the Leases exist: a build on a busy machine
	// can take longer than an election Lease lasts, and a Lease whose first
	// renewal comes after it ran out is taken anew, not renewed.
	bin := k.leasewatch
	if bin == "" {
		if bin, err = buildLeasewatch(ctx, dir, log); err != nil {
			return err
		}
	}

	fmt.Fprintf(log, "creating %d heartbeat and %d election Leases\n", k.heartbeats, k.elections)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: loadElectionsNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	heartbeats, err := createLeases(ctx, cs, heartbeatNS, "node-", k.heartbeats, 40)
	if err != nil {
		return err
	}
	elections, err := createLeases(ctx, cs, loadElectionsNS, "controller-", k.elections, 15)
	if err != nil {
		return err
	}

	lw, err := startLeasewatch(ctx, bin, dir, "", fmt.Sprintf(`  - name: %s
    kind: kubernetes
    kubeconfig: %s
    namespaces: [%s, %s]
    heartbeat_namespaces: [%s]
`, loadSource, kubeconfig, heartbeatNS, loadElectionsNS, heartbeatNS), log)
	if err != nil {
		return err
	}
	defer lw.stop()
	url := lw.url
	if err := waitFor(ctx, 60*time.Second, "leasewatch to record the first snapshot", func() bool {
		mfs, err := scrape(ctx, url)
		return err == nil && counterSum(mfs, "leasewatch_events_recorded_total", map[string]string{"source": loadSource}) >= float64(k.heartbeats+k.elections)
	}); err != nil {
		return err
	}

	fmt.Fprintf(log, "renewing for %s of warm-up and %s measured\n", k.warmup, k.duration)
	var updates, conflicts, skipped atomic.Int64
	w, err := k.renewWhileMeasuring(ctx, cs, lw, heartbeats, elections, &updates, &conflicts, &skipped)
	if err != nil {
		return err
	}

	offered := float64(k.heartbeats)/k.heartbeatEvery.Seconds() + float64(k.elections)/k.electionEvery.Seconds()
	title := fmt.Sprintf("leasewatch-load kubernetes: %d heartbeat Leases every %s + %d election Leases every %s (%.0f renewals/s offered), %s measured after %s warm-up; lag is renewTime → stored",
		k.heartbeats, k.heartbeatEvery, k.elections, k.electionEvery, offered, k.duration, k.warmup)
	return verify(ctx, out, dir, url, append(heartbeats, elections...), w, title, [][2]string{
		{"renewals achieved", fmt.Sprintf("%.0f/s (%d skipped while the apiserver was behind; update conflicts %d)", float64(updates.Load())/(k.warmup+k.duration).Seconds(), skipped.Load(), conflicts.Load())},
	})
}

// maxListed is how many differing Leases a run lists; maxDrain is how long
// it waits for leasewatch to record what it was sent.
const (
	maxListed = 20
	maxDrain  = time.Minute
)

// verify drains leasewatch and checks that every write the apiserver
// committed to the Leases all was recorded exactly once, as what it was, and
// writes the run's table (w, the scenario's rows, the check's) to out. It
// fails if any Lease differs.
func verify(ctx context.Context, out io.Writer, dir, url string, all []*lease, w window, title string, rows [][2]string) error {
	want := expectedKinds(all)
	// A leasewatch that fell far behind (the Leases expiring by its clock
	// faster than it records them) drains for minutes; past maxDrain the
	// check below says what it missed.
	drainCtx, cancel := context.WithTimeout(ctx, maxDrain)
	drained := drain(drainCtx, url, loadSource, map[string]float64{"renew": float64(want.renew), "grant": float64(want.grant)})
	cancel()
	events, err := recordedWrites(ctx, sqliteIn(dir), loadSource)
	if err != nil {
		return err
	}
	check := checkLeases(all, events)
	w.write(out, title, append(rows, [][2]string{
		{"writes committed / recorded as made", fmt.Sprintf("%d / %d (outcome unknown %d; drained %s)", want.writes, check.matched, want.unknown, drained)},
		{"writes after the Lease ran out", fmt.Sprintf("%d: recorded as %d grants, %d renewals (within %s of the deadline either is taken); %.0f expiries recorded",
			want.ranOut, check.ranOutAs["grant"], check.ranOutAs["renew"], judgedLate, recorded(ctx, url, loadSource, "expire"))},
		{"Leases that differ", fmt.Sprintf("%d", len(check.diffs))},
	}...))
	if len(check.diffs) > 0 {
		fmt.Fprintf(out, "\nLeases whose committed writes and recorded events differ:\n")
		for _, d := range check.diffs[:min(len(check.diffs), maxListed)] {
			fmt.Fprintf(out, "- %s\n", d)
		}
		if more := len(check.diffs) - maxListed; more > 0 {
			fmt.Fprintf(out, "- and %d more\n", more)
		}
		return fmt.Errorf("%d Leases differ between what the apiserver committed and what leasewatch recorded (listed above)", len(check.diffs))
	}
	return nil
}

func createLeases(ctx context.Context, cs kubernetes.Interface, ns, prefix string, n int, durationSeconds int32) ([]*lease, error) {
	out := make([]*lease, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			now := metav1.NewMicroTime(time.Now())
			obj := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", prefix, i), Namespace: ns},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To(fmt.Sprintf("%s%d_holder", prefix, i)), LeaseDurationSeconds: ptr.To(durationSeconds),
					AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0),
				},
			}
			created, err := cs.CoordinationV1().Leases(ns).Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				created, err = cs.CoordinationV1().Leases(ns).Get(ctx, obj.Name, metav1.GetOptions{})
			}
			if err != nil {
				errs <- err
				return
			}
			out[i] = &lease{name: ns + "/" + created.Name, obj: created, created: created.ResourceVersion}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, fmt.Errorf("create leases in %s: %w", ns, err)
	}
	return out, nil
}

// connect returns a client of the cluster the load runs against: the
// configured kubeconfig's, or a test kube-apiserver's on an embedded etcd
// started in dir (stop stops it).
func (k *kubeLoad) connect(ctx context.Context, dir string, log io.Writer) (kubeconfig string, cs kubernetes.Interface, stop func(), err error) {
	kubeconfig, restCfg, stop := k.kubeconfig, (*rest.Config)(nil), func() {}
	if kubeconfig == "" {
		fmt.Fprintln(log, "starting a test kube-apiserver on an embedded etcd")
		api, err := kubetest.Start(ctx, dir, io.Discard)
		if err != nil {
			return "", nil, nil, err
		}
		kubeconfig, restCfg, stop = api.Kubeconfig, api.Config, api.Stop
	} else if restCfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return "", nil, nil, err
	}
	restCfg.QPS, restCfg.Burst = 5000, 5000
	if cs, err = kubernetes.NewForConfig(restCfg); err != nil {
		stop()
		return "", nil, nil, err
	}
	return kubeconfig, cs, stop, nil
}

// renewWhileMeasuring renews each set of Leases at its interval while
// measure samples leasewatch through the warm-up and the measured window.
func (k *kubeLoad) renewWhileMeasuring(ctx context.Context, cs kubernetes.Interface, lw *leasewatchProc, heartbeats, elections []*lease, updates, conflicts, skipped *atomic.Int64) (window, error) {
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, set := range []struct {
		leases []*lease
		every  time.Duration
	}{{heartbeats, k.heartbeatEvery}, {elections, k.electionEvery}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			renewLoop(loadCtx, cs, set.leases, set.every, updates, conflicts, skipped)
		}()
	}
	w, err := measure(ctx, lw.url, lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	stopLoad()
	wg.Wait()
	return w, err
}

// renewLoop renews every lease once per period, spread evenly over it, until
// ctx ends. Requests in flight then finish (on their own deadline), so every
// renewal the apiserver applied is counted.
func renewLoop(ctx context.Context, cs kubernetes.Interface, leases []*lease, every time.Duration, updates, conflicts, skipped *atomic.Int64) {
	if len(leases) == 0 {
		return
	}
	work := make(chan *lease, len(leases))
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range work {
				reqCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if renew(reqCtx, cs, l, conflicts) {
					updates.Add(1)
				}
				cancel()
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
	}()
	dispatch(ctx, len(leases), every, func(i int) {
		select {
		case work <- leases[i]:
		default: // the apiserver is behind: skip rather than queue without bound
			skipped.Add(1)
		}
	})
}

// renew writes a new renewTime as the holder would; a conflict re-reads.
// Any other failure leaves open whether the apiserver committed the write
// (a timeout after the commit): the Lease is read back, and the write counts
// if it is there.
func renew(ctx context.Context, cs kubernetes.Interface, l *lease, conflicts *atomic.Int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	leases := cs.CoordinationV1().Leases(l.obj.Namespace)
	for attempt := 0; attempt < 3; attempt++ {
		obj := l.obj.DeepCopy()
		// renewTime is stored at microsecond precision (MicroTime).
		sent := time.Now().Truncate(time.Microsecond)
		obj.Spec.RenewTime = ptr.To(metav1.NewMicroTime(sent))
		updated, err := leases.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil {
			l.committed(updated)
			return true
		}
		if !apierrors.IsConflict(err) {
			readCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			fresh, gerr := leases.Get(readCtx, obj.Name, metav1.GetOptions{})
			switch {
			case gerr != nil:
				l.unknown++
			case fresh.Spec.RenewTime != nil && fresh.Spec.RenewTime.Time.Equal(sent):
				l.committed(fresh) // only the load writes its Leases
				return true
			default:
				l.obj = fresh
			}
			return false
		}
		conflicts.Add(1)
		if fresh, err := leases.Get(ctx, obj.Name, metav1.GetOptions{}); err == nil {
			l.obj = fresh
		}
	}
	return false
}

// committed notes a write the apiserver committed. l.mu is held.
func (l *lease) committed(updated *coordinationv1.Lease) {
	w := leaseWrite{rv: updated.ResourceVersion, renewed: renewTimeOf(updated)}
	if prev := renewTimeOf(l.obj); !prev.IsZero() && l.obj.Spec.LeaseDurationSeconds != nil {
		w.deadline = prev.Add(time.Duration(*l.obj.Spec.LeaseDurationSeconds) * time.Second)
	}
	l.obj = updated
	l.writes = append(l.writes, w)
}

func renewTimeOf(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// judgedLate is how far from a Lease's deadline a write may be and still be
// recorded as either a renewal or an expiry and a grant: leasewatch judges
// whether the Lease had run out when it sees the write, up to its lag after
// the write, and its clock expires a lease on a tick.
const judgedLate = 2 * time.Second

// writeTally is what the load's committed writes must have left in
// leasewatch's database.
type writeTally struct {
	writes  int // committed writes
	renew   int // of them, ones that must be renewals
	grant   int // ones that took a Lease that had run out: a grant
	ranOut  int // writes at or after their Lease's deadline
	unknown int // renewals whose outcome the load could not learn
}

// expectedKinds tallies the leases' committed writes. A write within
// judgedLate of its deadline counts toward neither renew nor grant.
func expectedKinds(leases []*lease) writeTally {
	var t writeTally
	for _, l := range leases {
		l.mu.Lock()
		t.unknown += l.unknown
		for _, w := range l.writes {
			t.writes++
			if w.ranOut() {
				t.ranOut++
			}
			switch kinds := w.kinds(); {
			case len(kinds) > 1:
			case kinds[0] == "renew":
				t.renew++
			default:
				t.grant++
			}
		}
		l.mu.Unlock()
	}
	return t
}

// kinds are the event kinds leasewatch may record w as.
func (w leaseWrite) kinds() []string {
	switch {
	case w.deadline.IsZero():
		return []string{"renew"}
	case w.renewed.Sub(w.deadline).Abs() < judgedLate:
		return []string{"renew", "grant"}
	case w.ranOut():
		return []string{"grant"}
	}
	return []string{"renew"}
}

// storedEvent is one event leasewatch stored for a Lease: a renewal by its
// renewTime (renewedAt, Unix nanoseconds), since a Kubernetes renewal keeps
// no resourceVersion, every other kind by its position.
type storedEvent struct {
	kind, position string
	renewedAt      int64
}

// key is what finds e among a Lease's writes: its position, or a renewal's
// renewTime when it has none.
func (e storedEvent) key() string {
	if e.position != "" || e.kind != "renew" {
		return e.position
	}
	return "renewed " + strconv.FormatInt(e.renewedAt, 10)
}

// recordedWrites returns, from leasewatch's database, the events of
// source that stand for a Lease write (observed, grant, renew), by lock name
// in (at, id) order.
func recordedWrites(ctx context.Context, database, source string) (map[string][]storedEvent, error) {
	out := make(map[string][]storedEvent)
	err := storedEvents(ctx, database, source, []audit.EventKind{audit.EventObserved, audit.EventGrant, audit.EventRenew},
		func(name string, e audit.Event) {
			out[name] = append(out[name], storedEvent{kind: string(e.Kind), position: e.Position, renewedAt: renewedAt(e)})
		})
	if err != nil {
		return nil, fmt.Errorf("read stored Lease writes: %w", err)
	}
	return out, nil
}

// checkLeases compares, Lease by Lease, every write the apiserver committed
// (by the resourceVersion it left, or for a renewal stored without one, its
// renewTime) with the events leasewatch stored: each
// must be there exactly once, as the kind it was. It returns how many writes
// matched and a line for each Lease that differs. The Lease as created may be
// stored once: observed by the first snapshot, or a grant seen by the watch.
func checkLeases(leases []*lease, stored map[string][]storedEvent) (c leaseCheck) {
	c.ranOutAs = make(map[string]int)
	for _, l := range leases {
		l.mu.Lock()
		name := l.name
		byPos := make(map[string][]string)
		for _, e := range stored[name] {
			byPos[e.key()] = append(byPos[e.key()], e.kind)
		}
		var problems []string
		for _, w := range l.writes {
			at := storedEvent{kind: "renew", renewedAt: w.renewed.UnixNano()}.key()
			got := append(byPos[w.rv], byPos[at]...)
			delete(byPos, w.rv)
			delete(byPos, at)
			switch want := w.kinds(); {
			case len(got) == 0:
				problems = append(problems, fmt.Sprintf("resourceVersion %s (renewTime %s) not recorded", w.rv, w.renewed.UTC().Format(time.RFC3339Nano)))
			case len(got) > 1:
				problems = append(problems, fmt.Sprintf("resourceVersion %s recorded %d times (%v)", w.rv, len(got), got))
			case !slices.Contains(want, got[0]):
				problems = append(problems, fmt.Sprintf("resourceVersion %s (renewTime %s, %s the deadline %s) recorded as %s, want %s",
					w.rv, w.renewed.UTC().Format(time.RFC3339Nano), beforeOrAfter(w), w.deadline.UTC().Format(time.RFC3339Nano), got[0], strings.Join(want, " or ")))
			default:
				c.matched++
				if w.ranOut() {
					c.ranOutAs[got[0]]++
				}
			}
		}
		if got := byPos[l.created]; len(got) == 1 && (got[0] == "observed" || got[0] == "grant") {
			delete(byPos, l.created)
		}
		for _, pos := range slices.Sorted(maps.Keys(byPos)) {
			problems = append(problems, fmt.Sprintf("resourceVersion or renewTime %s recorded as %v, but the load wrote no such version", pos, byPos[pos]))
		}
		if len(problems) > 0 {
			c.diffs = append(c.diffs, fmt.Sprintf("%s: %d writes committed; %s", name, len(l.writes), strings.Join(problems, "; ")))
		}
		l.mu.Unlock()
	}
	return c
}

// leaseCheck is the outcome of checkLeases.
type leaseCheck struct {
	matched int      // writes recorded once, as a kind they may be
	diffs   []string // one line per Lease that differs
	// ranOutAs counts, by the kind recorded, the matched writes made after
	// their Lease ran out.
	ranOutAs map[string]int
}

func beforeOrAfter(w leaseWrite) string {
	if w.ranOut() {
		return w.renewed.Sub(w.deadline).Round(time.Millisecond).String() + " after"
	}
	return w.deadline.Sub(w.renewed).Round(time.Millisecond).String() + " before"
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Microsecond).String()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// flags declares the kubernetes load's flags on fs.
func (k *kubeLoad) flags(fs *flag.FlagSet) {
	fs.IntVar(&k.heartbeats, "heartbeats", 2000, "heartbeat Leases in kube-node-lease")
	fs.DurationVar(&k.heartbeatEvery, "heartbeat-every", 10*time.Second, "renewal period of each heartbeat Lease")
	fs.IntVar(&k.elections, "elections", 50, "leader-election Leases")
	fs.DurationVar(&k.electionEvery, "election-every", 2*time.Second, "renewal period of each election Lease")
	fs.DurationVar(&k.warmup, "warmup", 15*time.Second, "load before measuring")
	fs.DurationVar(&k.duration, "duration", 60*time.Second, "measured load")
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "use this cluster instead of starting a test apiserver")
	fs.StringVar(&k.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&k.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
	fs.BoolVar(&k.replay, "replay", false, "replay the heartbeats from a recorded kube-apiserver watch at the rate asked, past what a real apiserver here can write (no election Leases)")
	fs.StringVar(&k.frames, "frames", "", "with --replay: the recorded watch to replay (a file --replay --keep saved; default: record one from a test apiserver)")
}
