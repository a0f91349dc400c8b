// Package alertmanagertest runs a real Alertmanager, built from its Go module,
// for the tests of leasewatch's alert sender.
//
// The binary is built with `go install` of a pinned version (newer module
// versions lack their UI assets and fail to build) into
// .cache/alertmanager-<version>/ at the repository root, and reused from
// there. A cold build takes a few minutes on 2 cores; `make deps` pays for it
// before the tests.
package alertmanagertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/deploy/gotool"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// Alertmanager's binary, built from a pinned module version (newer ones lack
// their UI assets and fail to build); a few minutes cold.
var Tool = gotool.Tool{Pkg: "github.com/prometheus/alertmanager/cmd/alertmanager", Version: "v0.28.1", Budget: 15 * time.Minute}

// config routes every alert to a receiver that notifies no one: the tests
// read alerts back through the API.
const config = `route:
  receiver: blackhole
  group_wait: 1s
receivers:
  - name: blackhole
`

// Alertmanager is a running alertmanager process.
type Alertmanager struct {
	// URL is the base URL, http://127.0.0.1:PORT (https with TLS).
	URL string
	// Addr is the listen address, the same across Stop and Start.
	Addr string
	// Gossip is the cluster listen address, with Options.Cluster.
	Gossip string

	t       testing.TB
	bin     string
	dir     string
	logPath string
	opts    Options
	cmd     *exec.Cmd
	done    chan error
}

// Options are what StartWith adds to a plain Alertmanager.
type Options struct {
	// WebConfig is the content of its --web.config.file (Prometheus's
	// exporter-toolkit: tls_server_config, basic_auth_users); empty, none.
	WebConfig string
	// TLS says WebConfig serves HTTPS: the URL's scheme.
	TLS bool
	// Client reaches it for the readiness probe and Alerts (its TLS, its
	// credentials); nil: http.DefaultClient.
	Client *http.Client
	// Cluster listens for gossip on a free loopback port and joins Peers.
	Cluster bool
	Peers   []*Alertmanager
}

// Start runs an alertmanager on a free loopback port, with its state in a
// temporary directory, and waits until it is ready. It is stopped when the
// test ends. Without a binary the test fails under CI=true and is skipped
// elsewhere.
func Start(t testing.TB) *Alertmanager { return StartWith(t, Options{}) }

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options) *Alertmanager {
	t.Helper()
	bin := Tool.Require(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "web.yml"), []byte(opts.WebConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	am := &Alertmanager{t: t, bin: bin, dir: dir, logPath: filepath.Join(dir, "alertmanager.log"), opts: opts}
	scheme := "http://"
	if opts.TLS {
		scheme = "https://"
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = testproc.FreePort(); err != nil {
			t.Fatal(err)
		}
		am.Addr = "127.0.0.1:" + strconv.Itoa(port)
		am.URL = scheme + am.Addr
		if opts.Cluster {
			if port, err = testproc.FreePort(); err != nil {
				t.Fatal(err)
			}
			am.Gossip = "127.0.0.1:" + strconv.Itoa(port)
		}
		if err = am.start(); err == nil {
			t.Cleanup(am.Stop)
			return am
		}
	}
	t.Fatalf("alertmanager never became ready: %v\nlast lines of its log:\n%s", err, testproc.Tail(readFile(am.logPath), 30))
	return nil
}

// Start starts a stopped alertmanager again on the same address, with the
// same storage, and waits until it is ready.
func (am *Alertmanager) Start() {
	am.t.Helper()
	var err error
	// The port was free a moment ago; retry in case the old socket lingers.
	for attempt := 0; attempt < 5; attempt++ {
		if err = am.start(); err == nil {
			return
		}
	}
	am.t.Fatalf("alertmanager did not restart on %s: %v\nlast lines of its log:\n%s", am.Addr, err, testproc.Tail(readFile(am.logPath), 30))
}

func (am *Alertmanager) start() error {
	log, err := os.OpenFile(am.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the process keeps its own descriptor
	args := []string{
		"--config.file=" + filepath.Join(am.dir, "alertmanager.yml"),
		"--storage.path=" + filepath.Join(am.dir, "data"),
		"--web.listen-address=" + am.Addr,
		"--cluster.listen-address=" + am.Gossip, // empty: no clustering, no gossip port
		"--log.level=debug",
	}
	if am.opts.WebConfig != "" {
		args = append(args, "--web.config.file="+filepath.Join(am.dir, "web.yml"))
	}
	for _, p := range am.opts.Peers {
		args = append(args, "--cluster.peer="+p.Gossip)
	}
	if am.Gossip != "" {
		// Gossip settles in a second on loopback, not the default minute.
		args = append(args, "--cluster.advertise-address="+am.Gossip, "--cluster.settle-timeout=2s",
			"--cluster.pushpull-interval=1s", "--cluster.gossip-interval=100ms")
	}
	am.cmd = exec.Command(am.bin, args...)
	am.cmd.Stdout, am.cmd.Stderr = log, log
	if err := am.cmd.Start(); err != nil {
		return fmt.Errorf("start alertmanager: %w", err)
	}
	am.done = make(chan error, 1)
	go func() { am.done <- am.cmd.Wait() }()
	if err := am.waitReady(); err != nil {
		am.Stop()
		return err
	}
	return nil
}

func (am *Alertmanager) waitReady() error {
	deadline := time.Now().Add(30 * time.Second)
	client := *am.opts.Client
	client.Timeout = time.Second
	for {
		resp, err := client.Get(am.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/-/ready: %s", resp.Status)
		}
		select {
		case err := <-am.done:
			am.done <- err
			return fmt.Errorf("alertmanager exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 30s: %v", err)
		}
	}
}

// Stop stops the process; Start starts it again. Stopping a stopped
// alertmanager does nothing.
func (am *Alertmanager) Stop() {
	if am.cmd == nil || am.cmd.Process == nil {
		return
	}
	_ = am.cmd.Process.Signal(os.Interrupt)
	select {
	case <-am.done:
	case <-time.After(10 * time.Second):
		_ = am.cmd.Process.Kill()
		<-am.done
	}
	am.cmd = nil
}

// Alert is an alert as Alertmanager's GET /api/v2/alerts returns it.
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
	Status       struct {
		State string `json:"state"` // active, suppressed or unprocessed
	} `json:"status"`
}

// Alerts returns the alerts Alertmanager holds that have not resolved
// (Alertmanager's API leaves resolved ones out).
func (am *Alertmanager) Alerts(ctx context.Context) ([]Alert, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, am.URL+"/api/v2/alerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := am.opts.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("GET /api/v2/alerts: %s: %s", resp.Status, b)
	}
	var alerts []Alert
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		return nil, fmt.Errorf("decode /api/v2/alerts: %w", err)
	}
	return alerts, nil
}

// ClusterPeers returns how many members Alertmanager's cluster has, itself
// included, from GET /api/v2/status.
func (am *Alertmanager) ClusterPeers(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, am.URL+"/api/v2/status", nil)
	if err != nil {
		return 0, err
	}
	resp, err := am.opts.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var status struct {
		Cluster struct {
			Peers []json.RawMessage `json:"peers"`
		} `json:"cluster"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /api/v2/status: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		return 0, fmt.Errorf("decode /api/v2/status: %w", err)
	}
	return len(status.Cluster.Peers), nil
}

// Log returns the end of the alertmanager's log, for failure messages.
func (am *Alertmanager) Log() string { return testproc.Tail(readFile(am.logPath), 30) }

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}
