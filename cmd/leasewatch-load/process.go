package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // openDatabase reads leasewatch's PostgreSQL database
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// leasewatchProc is a leasewatch serve process under measurement.
type leasewatchProc struct {
	cmd      *exec.Cmd
	url      string
	database string // its database: a SQLite file or a postgres:// URL
	done     chan error
}

// serveCPUProfile, when set, is where every leasewatch process the load
// starts writes its CPU profile (serve --cpuprofile). Set once from the
// command line, before any process starts.
var serveCPUProfile string

// serveMemProfile, when set, is where every leasewatch process the load
// starts writes a heap profile when it is stopped (serve --memprofile).
var serveMemProfile string

// startLeasewatch runs `leasewatch serve` on a free loopback port with its
// database in dir and the given sources section, building the binary first
// when bin is empty.
func startLeasewatch(ctx context.Context, bin, dir, database, sources string, log io.Writer) (*leasewatchProc, error) {
	if bin == "" {
		var err error
		if bin, err = buildLeasewatch(ctx, dir, log); err != nil {
			return nil, err
		}
	}
	port, err := testproc.FreePort()
	if err != nil {
		return nil, err
	}
	if database == "" {
		database = sqliteIn(dir)
	}
	config := fmt.Sprintf("listen: 127.0.0.1:%d\ndatabase: %s\nsources:\n%s", port, database, sources)
	path := filepath.Join(dir, "leasewatch.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return nil, err
	}
	p := &leasewatchProc{url: fmt.Sprintf("http://127.0.0.1:%d", port), database: database, done: make(chan error, 1)}
	args := []string{"serve", "--config", path}
	if serveCPUProfile != "" {
		args = append(args, "--cpuprofile", serveCPUProfile)
	}
	if serveMemProfile != "" {
		args = append(args, "--memprofile", serveMemProfile)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start leasewatch: %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

func (p *leasewatchProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// id names p among every process the load starts: a new process may get
// the port of one that ended.
func (p *leasewatchProc) id() string { return fmt.Sprintf("%s (pid %d)", p.url, p.cmd.Process.Pid) }

// kill ends p at once (kill -9), as a node's death would.
func (p *leasewatchProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// procStats are a process's CPU time and memory from /proc.
type procStats struct {
	at       time.Time
	cpu      time.Duration // user + system
	rss, hwm int64         // bytes: resident now, and its peak
	// rss split: anonymous (heaps) and file-backed (mapped files, such as
	// the database the read pool maps)
	anon, file int64
}

// clockTick is Linux's USER_HZ, the unit of utime and stime in /proc/PID/stat.
const clockTick = 100

func readProcStats(pid int) (procStats, error) {
	st := procStats{at: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	st.cpu = time.Duration(utime+stime) * time.Second / clockTick
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			st.rss = kb << 10
		case "VmHWM":
			st.hwm = kb << 10
		case "RssAnon":
			st.anon = kb << 10
		case "RssFile":
			st.file = kb << 10
		}
	}
	return st, sc.Err()
}

// scrape reads leasewatch's /metrics.
func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// labelled returns the metrics of family name whose labels include want.
func labelled(mfs map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	mf := mfs[name]
	if mf == nil {
		return nil
	}
	var out []*dto.Metric
next:
	for _, m := range mf.GetMetric() {
		for k, v := range want {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		out = append(out, m)
	}
	return out
}

// counterSum adds the counters of name whose labels include want.
func counterSum(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
	for _, m := range labelled(mfs, name, want) {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// histogramDelta is a histogram's cumulative bucket counts between two scrapes.
type histogramDelta struct {
	bounds []float64 // upper bounds, ascending, +Inf last
	counts []float64 // cumulative
}

func histogramBetween(before, after map[string]*dto.MetricFamily, name string, want map[string]string) histogramDelta {
	buckets := func(mfs map[string]*dto.MetricFamily) map[float64]float64 {
		out := map[float64]float64{}
		for _, m := range labelled(mfs, name, want) {
			for _, b := range m.GetHistogram().GetBucket() {
				if !math.IsInf(b.GetUpperBound(), 1) { // the text format lists +Inf; SampleCount is the same
					out[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			}
			out[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
		return out
	}
	b, a := buckets(before), buckets(after)
	var h histogramDelta
	for bound := range a {
		h.bounds = append(h.bounds, bound)
	}
	sort.Float64s(h.bounds)
	for _, bound := range h.bounds {
		h.counts = append(h.counts, a[bound]-b[bound])
	}
	return h
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile does:
// linear interpolation inside the bucket that holds it.
func (h histogramDelta) quantile(q float64) float64 {
	if len(h.counts) == 0 || h.counts[len(h.counts)-1] == 0 {
		return math.NaN()
	}
	rank := q * h.counts[len(h.counts)-1]
	lower, prev := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			upper := h.bounds[i]
			if math.IsInf(upper, 1) {
				return lower // beyond the last finite bucket: report its bound
			}
			if c == prev {
				return upper
			}
			return lower + (upper-lower)*(rank-prev)/(c-prev)
		}
		lower, prev = h.bounds[i], c
	}
	return lower
}

func (h histogramDelta) count() float64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// sqliteIn is the SQLite database of a leasewatch process whose folder is dir.
func sqliteIn(dir string) string { return filepath.Join(dir, "leasewatch.db") }

// openDatabase opens leasewatch's database read-only: a SQLite file, or a
// postgres:// URL. Queries use $1 placeholders, which both understand.
func openDatabase(database string) (*sql.DB, error) {
	if strings.HasPrefix(database, "postgres://") {
		sep := "?"
		if strings.Contains(database, "?") {
			sep = "&"
		}
		return sql.Open("pgx", database+sep+"default_transaction_read_only=on")
	}
	return sql.Open("sqlite", "file:"+database+"?mode=ro&_pragma=busy_timeout(5000)")
}
