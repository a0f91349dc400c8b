package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// ingestToken is the bearer token the load's resources report with.
const ingestToken = "leasewatch-load"

// ingestLoad is the ingest scenario: many protected resources reporting
// fenced writes for a few etcd locks that change hands, while people browse
// the dashboard, the pages and the live regions those pages poll.
type ingestLoad struct {
	writers    int           // resources posting write reports
	browsers   int           // people browsing the dashboard
	locks      int           // concurrency.Mutex locks, each with 2 contenders
	hold       time.Duration // how long each lock is held before it changes hands
	writeEvery time.Duration // a writer's pause between reports (±50%)
	think      time.Duration // a browser's pause between pages (±50%)
	batchers   float64       // the share of writers that send arrays of reports
	maxBatch   int           // the longest array
	rejected   float64       // the share of reports of a rejected stale write
	sample     time.Duration // between RSS samples
	duration   time.Duration
	leasewatch string
	keep       bool
	// commitInterval, when set, is leasewatch's commit_interval; zero
	// leaves its default.
	commitInterval time.Duration
}

// flags registers the ingest scenario's flags on fs.
func (k *ingestLoad) flags(fs *flag.FlagSet) {
	fs.IntVar(&k.writers, "writers", 200, "concurrent resources posting write reports")
	fs.IntVar(&k.browsers, "browsers", 50, "concurrent people browsing the dashboard")
	fs.IntVar(&k.locks, "locks", 20, "etcd locks the reports are about, each contended by 2 sessions")
	fs.DurationVar(&k.hold, "hold", 10*time.Second, "how long each lock is held before it changes hands")
	fs.DurationVar(&k.writeEvery, "write-every", 500*time.Millisecond, "a writer's pause between requests (±50%)")
	fs.DurationVar(&k.think, "think", time.Second, "a browser's think time between pages (±50%)")
	fs.Float64Var(&k.batchers, "batchers", 0.25, "share of the writers that send arrays of reports")
	fs.IntVar(&k.maxBatch, "batch", 20, "most reports in one array")
	fs.Float64Var(&k.rejected, "rejected", 0.125, "share of reports of a stale write the resource rejected")
	fs.DurationVar(&k.sample, "sample", 10*time.Second, "time between samples of leasewatch's RSS")
	fs.DurationVar(&k.duration, "duration", 5*time.Minute, "how long the load runs")
	fs.StringVar(&k.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&k.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
	fs.DurationVar(&k.commitInterval, "commit-interval", 0, "leasewatch's commit_interval setting (default: leasewatch's own)")
}

// The kinds of request the load times: two of ingest, the rest pages a
// person opens, and the live regions those pages poll (the page's own URL,
// fetched by htmx, which swaps in the region).
const (
	kindIngestOne   = "POST /api/v1/writes, one report"
	kindIngestBatch = "POST /api/v1/writes, array"
	kindOverview    = "overview /"
	kindOverviewHX  = "overview live region (htmx)"
	kindLocks       = "locks /locks"
	kindLocksSearch = "locks search /locks?q="
	kindLock        = "lock /locks/{id} (timeline)"
	kindLockHX      = "lock live region (htmx)"
	kindFindings    = "fencing gaps /findings"
	kindReview      = "incident review /review"
)

var ingestKinds = []string{kindIngestOne, kindIngestBatch}

var pageKinds = []string{kindOverview, kindOverviewHX, kindLocks, kindLocksSearch, kindLock, kindLockHX, kindFindings, kindReview}

// allKinds is every kind of request, ingest first.
func allKinds() []string { return slices.Concat(ingestKinds, pageKinds) }

// requestStats are the load's requests by kind.
type requestStats struct {
	mu    sync.Mutex
	kinds map[string]*kindStats
}

type kindStats struct {
	latencies []time.Duration // of the requests that succeeded
	errors    int
	firstErr  string
	reports   int // reports the successful requests carried (ingest)
}

func (s *requestStats) record(kind string, took time.Duration, reports int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil {
		s.kinds = make(map[string]*kindStats)
	}
	k := s.kinds[kind]
	if k == nil {
		k = &kindStats{}
		s.kinds[kind] = k
	}
	if err != nil {
		k.errors++
		if k.firstErr == "" {
			k.firstErr = err.Error()
		}
		return
	}
	k.latencies = append(k.latencies, took)
	k.reports += reports
}

func (s *requestStats) get(kind string) kindStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.kinds[kind]; k != nil {
		return *k
	}
	return kindStats{}
}

// quantiles returns the q-quantiles of ds (nearest rank), sorting ds.
func quantiles(ds []time.Duration, qs ...float64) []time.Duration {
	slices.Sort(ds)
	out := make([]time.Duration, len(qs))
	if len(ds) == 0 {
		return out
	}
	for i, q := range qs {
		out[i] = ds[int(q*float64(len(ds)-1)+0.5)]
	}
	return out
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// writeReport is one report as a resource sends it (docs/fencing.md,
// "Fenced writes").
type writeReport struct {
	Source       string `json:"source"`
	Lock         string `json:"lock"`
	Resource     string `json:"resource"`
	Token        int64  `json:"token"`
	Outcome      string `json:"outcome"`
	HighestToken int64  `json:"highest_token"`
	Holder       string `json:"holder"`
	At           string `json:"at"`
	RequestID    string `json:"request_id"`
}

// ingestSample is leasewatch at one moment of the load: its process, its
// database's files and its goroutines.
type ingestSample struct {
	procStats
	db, wal    int64 // bytes of the database file and of its WAL
	goroutines float64
	// goHeap is the Go heap in use and goHeld what the Go runtime holds from
	// the operating system (its memory less what it has released), from
	// leasewatch's metrics; -1 when it does not answer.
	goHeap, goHeld int64
}

// sampleLeasewatch reads the process pid, the database files in dir and the
// goroutines leasewatch at base reports (-1 when it does not answer).
func sampleLeasewatch(ctx context.Context, pid int, dir, base string) (ingestSample, error) {
	st, err := readProcStats(pid)
	if err != nil {
		return ingestSample{}, err
	}
	smp := ingestSample{procStats: st, goroutines: -1, goHeap: -1, goHeld: -1}
	if fi, err := os.Stat(filepath.Join(dir, "leasewatch.db")); err == nil {
		smp.db = fi.Size()
	}
	if fi, err := os.Stat(filepath.Join(dir, "leasewatch.db-wal")); err == nil {
		smp.wal = fi.Size()
	}
	if mfs, err := scrape(ctx, base); err == nil {
		if g := labelled(mfs, "go_goroutines", nil); len(g) > 0 {
			smp.goroutines = g[0].GetGauge().GetValue()
		}
		gauge := func(name string) (int64, bool) {
			g := labelled(mfs, name, nil)
			if len(g) == 0 {
				return 0, false
			}
			return int64(g[0].GetGauge().GetValue()), true
		}
		heap, ok1 := gauge("go_memstats_heap_inuse_bytes")
		sys, ok2 := gauge("go_memstats_sys_bytes")
		released, ok3 := gauge("go_memstats_heap_released_bytes")
		if ok1 && ok2 && ok3 {
			smp.goHeap, smp.goHeld = heap, sys-released
		}
	}
	return smp, nil
}

// sentReports is what one writer sent, by request_id sequence number: whether
// leasewatch answered 202 for it, and its outcome.
type sentReports struct {
	acked    []bool
	rejected []bool
}

// ingestResult is what a run of the ingest scenario measured.
type ingestResult struct {
	wall           time.Duration
	stats          *requestStats
	acked          int // reports answered 202
	ackedRejected  int // of which rejected writes
	stored         int // of the load's request_ids, rows stored
	missing        int // 202'd reports not stored
	duplicated     int // request_ids stored more than once
	unacked        int // stored reports that were never answered 202
	wrongOutcome   int // stored under the other outcome
	handovers      int
	cpu            time.Duration
	samples        []ingestSample
	findingsByKind map[string]int
	// leasewatch's metrics at the start and end of the load
	before, after map[string]*dto.MetricFamily
	// the machine's, at the start and end: the load shares it with the
	// backend, the clients and whatever else runs
	loadAvg [2]string
}

// errors is the number of failed requests of every kind.
func (r *ingestResult) errors() int {
	n := 0
	for _, kind := range allKinds() {
		n += r.stats.get(kind).errors
	}
	return n
}

func (k *ingestLoad) run(ctx context.Context, out, log io.Writer) error {
	r, err := k.execute(ctx, log)
	if err != nil {
		return err
	}
	k.write(out, r)
	return k.check(r)
}

// check fails the run on any failed request, any 202'd report not stored
// exactly once, or an RSS still growing at the end of a run long enough to
// tell.
func (k *ingestLoad) check(r *ingestResult) error {
	var problems []string
	if n := r.errors(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d requests failed", n))
	}
	if r.acked == 0 {
		problems = append(problems, "no report was accepted")
	}
	if r.missing > 0 || r.duplicated > 0 || r.unacked > 0 || r.wrongOutcome > 0 {
		problems = append(problems, fmt.Sprintf("of %d reports answered 202, %d not stored, %d stored more than once, %d stored under the other outcome; %d stored without a 202",
			r.acked, r.missing, r.duplicated, r.wrongOutcome, r.unacked))
	}
	if g, ok := memoryGrowth(r.samples, anonRSS); ok && g.floor > memoryGrowthLimit {
		problems = append(problems, fmt.Sprintf("leasewatch's anonymous memory was still growing: its floor in the second half of the run was %.0f%% above the first half's", 100*g.floor))
	}
	if len(problems) > 0 {
		return fmt.Errorf("ingest load: %s", strings.Join(problems, "; "))
	}
	return nil
}

// validate names the first flag whose value the load cannot run with.
func (k *ingestLoad) validate() error {
	switch {
	case k.writers < 1:
		return fmt.Errorf("--writers %d: want at least 1", k.writers)
	case k.browsers < 0:
		return fmt.Errorf("--browsers %d: want 0 or more", k.browsers)
	case k.locks < 1:
		return fmt.Errorf("--locks %d: want at least 1", k.locks)
	case k.maxBatch < 2:
		return fmt.Errorf("--batch %d: want at least 2", k.maxBatch)
	case k.batchers < 0 || k.batchers > 1:
		return fmt.Errorf("--batchers %g: want a share from 0 to 1", k.batchers)
	case k.rejected < 0 || k.rejected > 1:
		return fmt.Errorf("--rejected %g: want a share from 0 to 1", k.rejected)
	case k.commitInterval < 0:
		return fmt.Errorf("--commit-interval %s: want a positive duration, or 0 for leasewatch's default", k.commitInterval)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"hold", k.hold}, {"write-every", k.writeEvery}, {"think", k.think}, {"sample", k.sample}, {"duration", k.duration}} {
		if d.d <= 0 {
			return fmt.Errorf("--%s %s: want a positive duration", d.name, d.d)
		}
	}
	return nil
}

// execute runs the load and gathers its figures. The run fails only when it
// cannot be carried out; what the figures say is for check.
func (k *ingestLoad) execute(ctx context.Context, log io.Writer) (*ingestResult, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	dir, done, err := runFolder(k.keep, log)
	if err != nil {
		return nil, err
	}
	defer done()
	const sessions, ttl = 4, 5 * time.Second
	config := fmt.Sprintf("ingest_tokens: [%q]\n", ingestToken)
	if k.commitInterval > 0 {
		config += fmt.Sprintf("commit_interval: %s\n", k.commitInterval)
	}
	rig, err := startEtcdRig(ctx, k.leasewatch, dir, config, sessions, ttl, log)
	if err != nil {
		return nil, err
	}
	defer rig.close()
	locks, stopContending := k.contend(ctx, rig, sessions)
	defer stopContending()
	lockIDs := make([]string, k.locks)
	if err := waitFor(ctx, 60*time.Second, "every lock's first holder, recorded", func() bool {
		return knownLocks(ctx, rig.lw.url, locks, lockIDs) == len(locks)
	}); err != nil {
		return nil, err
	}

	fmt.Fprintf(log, "ingest: %d writers every %s, %d browsers thinking %s, %d etcd locks changing hands every %s, for %s\n",
		k.writers, k.writeEvery, k.browsers, k.think, k.locks, k.hold, k.duration)
	loadCtx, stopLoad := context.WithTimeout(ctx, k.duration)
	defer stopLoad()
	var handing sync.WaitGroup
	handing.Go(func() {
		dispatch(loadCtx, k.locks, k.hold, func(i int) {
			select {
			case locks[i].release <- struct{}{}:
			default: // the last handover is still under way
			}
		})
	})

	pid := rig.lw.cmd.Process.Pid
	res := &ingestResult{stats: &requestStats{}}
	before, err := sampleLeasewatch(ctx, pid, dir, rig.lw.url)
	if err != nil {
		return nil, err
	}
	res.samples = append(res.samples, before)
	if res.before, err = scrape(ctx, rig.lw.url); err != nil {
		return nil, err
	}
	res.loadAvg[0] = loadAverage()
	var sampling sync.WaitGroup
	sampling.Go(func() { k.sampleUntil(loadCtx, ctx, pid, dir, rig.lw.url, before, res, log) })

	sent := k.runClients(loadCtx, rig.lw.url, locks, lockIDs, res.stats)
	if res.after, err = scrape(ctx, rig.lw.url); err != nil {
		return nil, err
	}
	res.loadAvg[1] = loadAverage()
	after, err := sampleLeasewatch(ctx, pid, dir, rig.lw.url)
	stopLoad()
	sampling.Wait()
	handing.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	res.samples = append(res.samples, after)
	res.wall = after.at.Sub(before.at)
	res.cpu = after.cpu - before.cpu
	res.tally(locks, sent)
	if err := checkStored(ctx, sqliteIn(dir), sent, res); err != nil {
		return nil, err
	}
	return res, nil
}

// contend starts the locks, which change hands every k.hold between two
// contenders each, as in the etcd scenario, so the reports carry the tokens
// of real tenures. stop ends the contention and waits for it.
func (k *ingestLoad) contend(ctx context.Context, rig *etcdRig, sessions int) (locks []*loggedLock, stop func()) {
	locks = make([]*loggedLock, k.locks)
	t := &loadTally{}
	queueCtx, stopQueue := context.WithCancel(ctx)
	holdCtx, stopHolding := context.WithCancel(ctx)
	var contending sync.WaitGroup
	for i := range locks {
		locks[i] = &loggedLock{name: fmt.Sprintf("%slock-%d", etcdLoadPrefix, i), release: make(chan struct{}, 1)}
		for j := range 2 {
			s := rig.sessions[(i+j*sessions/2)%sessions]
			contending.Go(func() { contend(queueCtx, holdCtx, s, locks[i], t) })
		}
	}
	return locks, func() {
		stopQueue()
		stopHolding()
		contending.Wait()
	}
}

// sampleUntil samples leasewatch (pid, its database in dir) every k.sample
// into res until loadCtx ends, and logs each sample against before.
func (k *ingestLoad) sampleUntil(loadCtx, ctx context.Context, pid int, dir, url string, before ingestSample, res *ingestResult, log io.Writer) {
	tick := time.NewTicker(k.sample)
	defer tick.Stop()
	for {
		select {
		case <-loadCtx.Done():
			return
		case <-tick.C:
			if smp, err := sampleLeasewatch(ctx, pid, dir, url); err == nil {
				res.samples = append(res.samples, smp)
				fmt.Fprintf(log, "%8s  RSS %6.1f MiB (anonymous %6.1f, file %6.1f; Go heap %6.1f)  database %6.1f MiB, WAL %6.1f MiB  goroutines %4.0f  CPU %s\n",
					smp.at.Sub(before.at).Round(time.Second), mib(smp.rss), mib(smp.anon), mib(smp.file), mib(smp.goHeap), mib(smp.db), mib(smp.wal), smp.goroutines,
					(smp.cpu - before.cpu).Round(10*time.Millisecond))
			}
		}
	}
}

// runClients runs the writers and browsers against url until loadCtx ends,
// and returns what each writer sent.
func (k *ingestLoad) runClients(loadCtx context.Context, url string, locks []*loggedLock, lockIDs []string, stats *requestStats) []sentReports {
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: k.writers + k.browsers, MaxIdleConns: k.writers + k.browsers},
	}
	defer client.CloseIdleConnections()
	sent := make([]sentReports, k.writers)
	var clients sync.WaitGroup
	for w := range k.writers {
		batcher := float64(w) < k.batchers*float64(k.writers)
		clients.Go(func() { k.writer(loadCtx, client, url, w, batcher, locks, &sent[w], stats) })
	}
	for b := range k.browsers {
		clients.Go(func() { k.browser(loadCtx, client, url, b, locks, lockIDs, stats) })
	}
	clients.Wait()
	return sent
}

// tally counts the locks' handovers and the reports answered 202.
func (res *ingestResult) tally(locks []*loggedLock, sent []sentReports) {
	for _, l := range locks {
		l.mu.Lock()
		res.handovers += len(l.tenures) - 1
		l.mu.Unlock()
	}
	for _, s := range sent {
		for i, ok := range s.acked {
			if ok {
				res.acked++
				if s.rejected[i] {
					res.ackedRejected++
				}
			}
		}
	}
}

// knownLocks fills ids with the dashboard ids of the locks that have had a
// holder and that leasewatch has recorded, and returns how many it found.
func knownLocks(ctx context.Context, base string, locks []*loggedLock, ids []string) int {
	var resp struct {
		Locks []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"locks"`
	}
	if err := getJSON(ctx, base+"/api/v1/locks?source="+loadSource+"&limit=10000", &resp); err != nil {
		return 0
	}
	byName := make(map[string]int64, len(resp.Locks))
	for _, l := range resp.Locks {
		byName[l.Name] = l.ID
	}
	n := 0
	for i, l := range locks {
		l.mu.Lock()
		held := len(l.tenures) > 0
		l.mu.Unlock()
		if id, ok := byName[l.name]; ok && held {
			ids[i] = strconv.FormatInt(id, 10)
			n++
		}
	}
	return n
}

// loadAverage is the machine's load average over the last minute.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// jitter is d ± 50%.
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

// report makes a report of a write to the resource of a lock of source: accepted under the
// current holder's token, or (a share k.rejected of them, once the lock has
// changed hands) rejected, from the previous holder, still writing with its
// old token: a zombie the fencing stopped.
func (k *ingestLoad) report(rng *rand.Rand, source string, locks []*loggedLock, requestID string) (writeReport, bool) {
	i := rng.IntN(len(locks))
	l := locks[i]
	l.mu.Lock()
	cur := l.tenures[len(l.tenures)-1]
	from, outcome := cur, "accepted"
	if len(l.tenures) > 1 && rng.Float64() < k.rejected {
		from, outcome = l.tenures[len(l.tenures)-2], "rejected"
	}
	l.mu.Unlock()
	return writeReport{
		Source:       source,
		Lock:         l.name,
		Resource:     fmt.Sprintf("store-%d", i),
		Token:        from.token,
		Outcome:      outcome,
		HighestToken: cur.token,
		Holder:       path.Base(from.key), // the collector's holder: the session's lease in hex
		At:           time.Now().UTC().Format(time.RFC3339Nano),
		RequestID:    requestID,
	}, outcome == "rejected"
}

// writer posts reports as resource w until ctx ends: one at a time, or arrays
// of 2 to k.maxBatch when it is a batcher, every k.writeEvery or so.
func (k *ingestLoad) writer(ctx context.Context, client *http.Client, base string, w int, batcher bool, locks []*loggedLock, sent *sentReports, stats *requestStats) {
	rng := rand.New(rand.NewPCG(uint64(w), 1))
	if sleep(ctx, time.Duration(rng.Int64N(int64(k.writeEvery)+1))) != nil { // spread the first requests
		return
	}
	for ctx.Err() == nil {
		n, kind := 1, kindIngestOne
		if batcher {
			n, kind = 2+rng.IntN(k.maxBatch-1), kindIngestBatch
		}
		first := len(sent.acked)
		reports := make([]writeReport, n)
		for i := range reports {
			var rejected bool
			reports[i], rejected = k.report(rng, loadSource, locks, fmt.Sprintf("w%d-%d", w, first+i))
			sent.acked = append(sent.acked, false)
			sent.rejected = append(sent.rejected, rejected)
		}
		var body []byte
		if batcher {
			body, _ = json.Marshal(reports)
		} else {
			body, _ = json.Marshal(reports[0])
		}
		start := time.Now()
		err := post(client, base+"/api/v1/writes", body, n)
		stats.record(kind, time.Since(start), n, err)
		if err == nil {
			for i := range n {
				sent.acked[first+i] = true
			}
		}
		if sleep(ctx, jitter(rng, k.writeEvery)) != nil {
			return
		}
	}
}

// post sends one ingest request. It is not bound to the load's end: a report
// under way is answered either way, so that the check afterwards knows
// whether it was stored.
func post(client *http.Client, u string, body []byte, n int) error {
	req, err := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+ingestToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(answer))
	}
	var got struct {
		Accepted int `json:"accepted"`
	}
	if err := json.Unmarshal(answer, &got); err != nil || got.Accepted != n {
		return fmt.Errorf("202 %s for %d reports", bytes.TrimSpace(answer), n)
	}
	return nil
}

// browser is a person with the dashboard open: the overview (and its live
// region refreshing), the locks list and a search, a lock's timeline (and its
// live region), the fencing gaps and an incident review of that lock, with
// think time between pages, until ctx ends.
func (k *ingestLoad) browser(ctx context.Context, client *http.Client, base string, b int, locks []*loggedLock, ids []string, stats *requestStats) {
	rng := rand.New(rand.NewPCG(uint64(b), 2))
	for ctx.Err() == nil {
		i := rng.IntN(len(locks))
		lock := "/locks/" + ids[i]
		review := "/review?" + url.Values{
			"source": {loadSource},
			"lock":   {loadSource + "/" + locks[i].name},
			"from":   {time.Now().Add(-15 * time.Minute).UTC().Format(time.RFC3339)},
		}.Encode()
		visits := []struct {
			kind, path, live string
		}{
			{kindOverview, "/", ""},
			{kindOverviewHX, "/", "overview"},
			{kindLocks, "/locks", ""},
			{kindLocksSearch, "/locks?q=lock-" + strconv.Itoa(rng.IntN(len(locks))), ""},
			{kindLock, lock, ""},
			{kindLockHX, lock, "lock-live"},
			{kindFindings, "/findings", ""},
			{kindReview, review, ""},
		}
		for _, v := range visits {
			if sleep(ctx, jitter(rng, k.think)) != nil {
				return
			}
			start := time.Now()
			err := get(client, base, v.path, v.live)
			stats.record(v.kind, time.Since(start), 0, err)
		}
	}
}

// get fetches a page, as htmx refreshing the live region live when it is
// not empty, and reads it whole. Like post, it is not bound to the load's
// end: a person's page is not cut off half-way.
func get(client *http.Client, base, path, live string) error {
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		return err
	}
	if live != "" {
		req.Header.Set("HX-Request", "true")
		req.Header.Set("HX-Target", live)
		req.Header.Set("HX-Current-URL", base+path)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, page)
	}
	if live != "" && !bytes.Contains(page, []byte(`id="`+live+`"`)) {
		return fmt.Errorf("GET %s: no live region %q to swap in", path, live)
	}
	return nil
}

// checkStored reads the reports leasewatch stored from database and
// compares them, by request_id, with what the writers were answered; and
// counts the findings.
func checkStored(ctx context.Context, database string, sent []sentReports, r *ingestResult) error {
	db, err := openDatabase(database)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT request_id, kind, count(*) FROM events
		WHERE request_id IS NOT NULL GROUP BY request_id, kind`)
	if err != nil {
		return fmt.Errorf("read the stored reports: %w", err)
	}
	defer rows.Close()
	stored := make([][]int, len(sent))
	for i := range sent {
		stored[i] = make([]int, len(sent[i].acked))
	}
	for rows.Next() {
		var id, kind string
		var n int
		if err := rows.Scan(&id, &kind, &n); err != nil {
			return err
		}
		r.stored += n
		w, seq, ok := parseRequestID(id)
		if !ok || w >= len(sent) || seq >= len(sent[w].acked) || !sent[w].acked[seq] {
			r.unacked += n
			continue
		}
		stored[w][seq] += n
		if (kind == "write_rejected") != sent[w].rejected[seq] {
			r.wrongOutcome += n
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if r.findingsByKind, err = findingKinds(ctx, db); err != nil {
		return err
	}
	for w := range sent {
		for seq, acked := range sent[w].acked {
			switch n := stored[w][seq]; {
			case acked && n == 0:
				r.missing++
			case n > 1:
				r.duplicated++
			}
		}
	}
	return nil
}

// parseRequestID reads a writer's request_id, "w<writer>-<sequence>".
func parseRequestID(id string) (w, seq int, ok bool) {
	ws, ss, ok := strings.Cut(strings.TrimPrefix(id, "w"), "-")
	if !ok || !strings.HasPrefix(id, "w") {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(ws)
	seq, err2 := strconv.Atoi(ss)
	return w, seq, err1 == nil && err2 == nil && w >= 0 && seq >= 0
}

// findingKinds counts the findings leasewatch stored, by kind.
func findingKinds(ctx context.Context, db *sql.DB) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT kind, count(*) FROM findings GROUP BY kind`)
	if err != nil {
		return nil, fmt.Errorf("count the findings: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int)
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, err
		}
		out[kind] = n
	}
	return out, rows.Err()
}

// memoryGrowthLimit is how much higher leasewatch's anonymous memory may be
// at its lowest in the second half of a run than in the first for it to count
// as levelled off. The lowest samples are the ones nearest the live heap: a
// leak raises them, while the peaks follow how many requests are in flight
// (and when the GC last ran). The file-backed part of the RSS is the binary
// and the database the read pool maps, which grows with the database and
// which the kernel can reclaim.
const memoryGrowthLimit = 0.10

// growth compares the two halves of a run: the ratio of their peaks and of
// their floors (lowest samples), less one.
type growth struct{ peak, floor float64 }

// memoryGrowth compares measure in the two halves of the run after its first
// fifth (the caches and pools filling). ok is false when the run was too
// short to tell (under 2 minutes or 8 samples).
func memoryGrowth(samples []ingestSample, measure func(ingestSample) int64) (g growth, ok bool) {
	if len(samples) < 8 || samples[len(samples)-1].at.Sub(samples[0].at) < 2*time.Minute {
		return g, false
	}
	settled := samples[len(samples)/5:]
	half := len(settled) / 2
	lo1, hi1, ok1 := bounds(settled[:half], measure)
	lo2, hi2, ok2 := bounds(settled[half:], measure)
	return growth{peak: float64(hi2)/float64(hi1) - 1, floor: float64(lo2)/float64(lo1) - 1}, ok1 && ok2
}

// floorsByPart returns the least of measure in each of parts equal spans of
// the samples, in MiB: where memory levels off the later ones are alike,
// whatever the first half held of the warm-up. A span with no value is "—".
func floorsByPart(samples []ingestSample, measure func(ingestSample) int64, parts int) []string {
	floors := make([]string, 0, parts)
	for i := range parts {
		lo, _, ok := bounds(samples[i*len(samples)/parts:(i+1)*len(samples)/parts], measure)
		if !ok {
			floors = append(floors, "—")
			continue
		}
		floors = append(floors, fmt.Sprintf("%.1f", mib(lo)))
	}
	return floors
}

// bounds returns the least and greatest of measure over ss, leaving out
// samples it has no value for (negative); ok is false if none has one.
func bounds(ss []ingestSample, measure func(ingestSample) int64) (lo, hi int64, ok bool) {
	for _, s := range ss {
		v := measure(s)
		switch {
		case v < 0:
		case !ok:
			lo, hi, ok = v, v, true
		default:
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	return lo, hi, ok
}

func anonRSS(s ingestSample) int64  { return s.anon }
func fileRSS(s ingestSample) int64  { return s.file }
func totalRSS(s ingestSample) int64 { return s.rss }
func walSize(s ingestSample) int64  { return s.wal }
func goHeap(s ingestSample) int64   { return s.goHeap }

// outsideGo is the anonymous memory the Go runtime does not hold: SQLite's
// page caches, mostly. -1 when the metrics did not answer.
func outsideGo(s ingestSample) int64 {
	if s.goHeld < 0 {
		return -1
	}
	return max(0, s.anon-s.goHeld)
}

// write prints the run's figures as Markdown tables.
func (k *ingestLoad) write(out io.Writer, r *ingestResult) {
	fmt.Fprintf(out, "\nleasewatch-load ingest: %d writers (%.0f%% sending arrays of 2–%d) pausing %s ±50%%, %d browsers thinking %s ±50%%, %d etcd locks changing hands every %s, for %s\n\n",
		k.writers, 100*k.batchers, k.maxBatch, k.writeEvery, k.browsers, k.think, k.locks, k.hold, r.wall.Round(time.Second))
	if k.commitInterval > 0 {
		fmt.Fprintf(out, "leasewatch's commit_interval: %s\n\n", k.commitInterval)
	}
	r.writeRequests(out)
	r.writeServerTime(out)
	r.writeMeasures(out)
	r.writeSamples(out)
}

// writeRequests prints the requests the load made, by kind, as the clients
// timed them.
func (r *ingestResult) writeRequests(out io.Writer) {
	wall := r.wall.Seconds()
	fmt.Fprintf(out, "| requests | count | errors | per second | p50 | p95 | p99 |\n|---|---|---|---|---|---|---|\n")
	for _, kind := range allKinds() {
		s := r.stats.get(kind)
		if len(s.latencies) == 0 {
			fmt.Fprintf(out, "| %s | %d | %d | 0 | — | — | — |\n", kind, s.errors, s.errors)
			continue
		}
		q := quantiles(s.latencies, 0.50, 0.95, 0.99)
		fmt.Fprintf(out, "| %s | %d | %d | %.1f | %s | %s | %s |\n", kind, len(s.latencies)+s.errors, s.errors, float64(len(s.latencies))/wall, ms(q[0]), ms(q[1]), ms(q[2]))
	}
	var all []time.Duration
	var ingestReqs, pageReqs int
	for _, kind := range ingestKinds {
		s := r.stats.get(kind)
		all = append(all, s.latencies...)
		ingestReqs += len(s.latencies)
	}
	iq := quantiles(all, 0.50, 0.95, 0.99)
	all = all[:0]
	for _, kind := range pageKinds {
		s := r.stats.get(kind)
		all = append(all, s.latencies...)
		pageReqs += len(s.latencies)
	}
	pq := quantiles(all, 0.50, 0.95, 0.99)
	fmt.Fprintf(out, "| **all ingest** | %d | | %.1f | %s | %s | %s |\n", ingestReqs, float64(ingestReqs)/wall, ms(iq[0]), ms(iq[1]), ms(iq[2]))
	fmt.Fprintf(out, "| **all dashboard pages** | %d | | %.1f | %s | %s | %s |\n", pageReqs, float64(pageReqs)/wall, ms(pq[0]), ms(pq[1]), ms(pq[2]))
	for _, kind := range allKinds() {
		if s := r.stats.get(kind); s.errors > 0 {
			fmt.Fprintf(out, "\n%s: first error: %s", kind, s.firstErr)
		}
	}

}

// writeServerTime prints the time leasewatch spent per request and commit.
func (r *ingestResult) writeServerTime(out io.Writer) {
	// leasewatch's own view: time in its handlers by route, and its group
	// commits, from its histograms, which the client's figures above include
	// along with waiting for a connection and for the CPU.
	fmt.Fprintf(out, "\n| leasewatch's server time (its histograms) | count | p50 | p95 | p99 |\n|---|---|---|---|---|\n")
	serverRows := []struct{ name, metric, route string }{
		{"POST /api/v1/writes", "leasewatch_http_request_duration_seconds", "/api/v1/writes"},
		{"GET / (overview)", "leasewatch_http_request_duration_seconds", "/"},
		{"GET /locks", "leasewatch_http_request_duration_seconds", "/locks"},
		{"GET /locks/:id", "leasewatch_http_request_duration_seconds", "/locks/:id"},
		{"GET /findings", "leasewatch_http_request_duration_seconds", "/findings"},
		{"GET /review", "leasewatch_http_request_duration_seconds", "/review"},
		{"group commit (one SQLite transaction)", "leasewatch_commit_duration_seconds", ""},
	}
	for _, row := range serverRows {
		want := map[string]string{}
		if row.route != "" {
			want["route"] = row.route
		}
		h := histogramBetween(r.before, r.after, row.metric, want)
		if h.count() == 0 {
			fmt.Fprintf(out, "| %s | 0 | — | — | — |\n", row.name)
			continue
		}
		fmt.Fprintf(out, "| %s | %.0f | %s | %s | %s |\n", row.name, h.count(), seconds(h.quantile(0.50)), seconds(h.quantile(0.95)), seconds(h.quantile(0.99)))
	}

}

// writeMeasures prints the reports stored, leasewatch's CPU and memory,
// and the database.
func (r *ingestResult) writeMeasures(out io.Writer) {
	wall := r.wall.Seconds()
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	memRange := func(measure func(ingestSample) int64) string {
		lo, hi, ok := bounds(r.samples, measure)
		if !ok {
			return "not measured"
		}
		level := "too short to compare the halves"
		if g, ok := memoryGrowth(r.samples, measure); ok {
			level = fmt.Sprintf("second half on the first: floor %+.0f%%, peak %+.0f%%", 100*g.floor, 100*g.peak)
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f MiB; %s", mib(lo), mib(hi), mib(measure(last)), level)
	}
	level := "too short to tell (under 2 minutes)"
	if g, ok := memoryGrowth(r.samples, anonRSS); ok {
		level = "yes"
		if g.floor > memoryGrowthLimit {
			level = "NO"
		}
		level += fmt.Sprintf(" (anonymous memory's floor in the second half %+.0f%% on the first half's, after the first fifth; limit %+.0f%%)", 100*g.floor, 100*memoryGrowthLimit)
	}
	var lowG, highG float64 = first.goroutines, first.goroutines
	for _, s := range r.samples {
		lowG, highG = min(lowG, s.goroutines), max(highG, s.goroutines)
	}
	findings := make([]string, 0, len(r.findingsByKind))
	for _, kind := range slices.Sorted(maps.Keys(r.findingsByKind)) {
		findings = append(findings, fmt.Sprintf("%s %d", kind, r.findingsByKind[kind]))
	}
	fmt.Fprintf(out, "\n| measure | value |\n|---|---|\n")
	for _, row := range [][2]string{
		{"reports answered 202", fmt.Sprintf("%d (%.0f/s; %d of rejected writes)", r.acked, float64(r.acked)/wall, r.ackedRejected)},
		{"stored exactly once", fmt.Sprintf("%d of %d (%d missing, %d duplicated, %d under the other outcome; %d stored without a 202; %d rows with a request_id)",
			r.acked-r.missing-r.duplicated, r.acked, r.missing, r.duplicated, r.wrongOutcome, r.unacked, r.stored)},
		{"lock handovers during the load", fmt.Sprint(r.handovers)},
		{"findings", strings.Join(findings, ", ")},
		{"leasewatch CPU", fmt.Sprintf("%.1f%% of one core", 100*r.cpu.Seconds()/wall)},
		{"leasewatch RSS min / max / last", memRange(totalRSS) + fmt.Sprintf(" (kernel's peak %.1f MiB)", mib(last.hwm))},
		{"of which anonymous (heaps)", memRange(anonRSS)},
		{"of which file-backed (the binary, the mapped database)", memRange(fileRSS)},
		{"Go heap in use (go_memstats_heap_inuse_bytes)", memRange(goHeap)},
		{"anonymous memory the Go runtime does not hold (SQLite's page caches)", memRange(outsideGo)},
		{"leasewatch goroutines min / max / last", fmt.Sprintf("%.0f / %.0f / %.0f", lowG, highG, last.goroutines)},
		{"memory levels off", level},
		{"anonymous memory's lowest sample in each fifth of the run", strings.Join(floorsByPart(r.samples, anonRSS, 5), ", ") + " MiB"},
		{"database file at the end", fmt.Sprintf("%.1f MiB", mib(last.db))},
		{"its WAL min / max / last", memRange(walSize)},
		{"machine load average (1 min) at start / end", r.loadAvg[0] + " / " + r.loadAvg[1]},
	} {
		fmt.Fprintf(out, "| %s | %s |\n", row[0], row[1])
	}
}

// writeSamples prints leasewatch's samples, about one per half minute.
func (r *ingestResult) writeSamples(out io.Writer) {
	first := r.samples[0]
	fmt.Fprintf(out, "\n| minute | leasewatch RSS | anonymous | file-backed | Go heap in use | goroutines | database | WAL | CPU so far |\n|---|---|---|---|---|---|---|---|---|\n")
	next := time.Duration(0)
	for i, s := range r.samples {
		at := s.at.Sub(first.at)
		if at >= next || i == len(r.samples)-1 {
			fmt.Fprintf(out, "| %.1f | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.0f | %.1f MiB | %.1f MiB | %s |\n", at.Minutes(), mib(s.rss), mib(s.anon), mib(s.file), mib(s.goHeap), s.goroutines, mib(s.db), mib(s.wal), (s.cpu - first.cpu).Round(100*time.Millisecond))
			next = at.Truncate(time.Minute/2) + time.Minute/2
		}
	}
}
