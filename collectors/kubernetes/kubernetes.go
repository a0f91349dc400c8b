// Package kubernetes collects lock history from coordination.k8s.io/v1
// Leases: client-go leader election, operators built on it, and the
// heartbeat Leases of nodes and kube-apiservers.
//
// The collector lists the Leases once, then watches them, and turns every
// Lease write into an observation: a holder change is a grant, the same
// holder with a new renewTime a renewal, a cleared holderIdentity (client-go's
// ReleaseOnCancel) a release, a deleted Lease the end of its tenure. Nobody
// writes expiry, so the tracker derives it from renewTime plus
// leaseDurationSeconds (Input.ExpireByClock). The token is leaseTransitions,
// which client-go raises by one per change of holder (Input.SequentialTokens);
// the resourceVersion of each write is recorded as its position.
//
// The cursor is the resourceVersion the last recorded input covers, so a
// restart resumes the watch exactly there. When the apiserver no longer has
// that history (410 Gone), the collector records a blind window, lists the
// Leases again and records what it finds as inferred grants.
// See collectors/backends.md, section B, for the Kubernetes behaviour relied on.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// NamespaceNodeLease is where kubelets keep their heartbeat Leases, the
// default of Config.HeartbeatNamespaces.
const NamespaceNodeLease = "kube-node-lease"

// DefaultWatchTimeout is roughly how long one watch request lasts before the
// collector opens the next one from the last resourceVersion it recorded
// (each request gets between one and two times this, so watches of several
// namespaces do not all end together). client-go's reflector uses 5 to 10
// minutes likewise.
const DefaultWatchTimeout = 5 * time.Minute

// DefaultBatchWindow is how long, at most, a watch event waits for others to
// be recorded with it (see WithBatchWindow).
const DefaultBatchWindow = 100 * time.Millisecond

// Config configures one Kubernetes source.
type Config struct {
	Name string // the source's name
	// Kubeconfig is the path of a kubeconfig file; a leading ~ is the home
	// directory. Empty: the KUBECONFIG environment variable, then
	// ~/.kube/config, then the in-cluster service account, as kubectl does.
	Kubeconfig string
	// Context selects a kubeconfig context other than the current one.
	Context string
	// Namespaces to watch; empty watches every namespace with one watch.
	// With namespaces, each gets its own watch (so a namespaced Role is
	// enough) and the cursor records each one's resourceVersion.
	Namespaces []string
	// HeartbeatNamespaces hold liveness Leases rather than locks: their
	// Leases are recorded with class heartbeat. nil means [kube-node-lease];
	// an empty, non-nil slice means none. kube-apiserver identity Leases in
	// kube-system are heartbeats regardless.
	HeartbeatNamespaces []string
}

// Option adjusts a Collector.
type Option func(*Collector)

// WithRESTConfig makes the collector use cfg instead of loading a kubeconfig;
// Config.Kubeconfig and Config.Context must then be empty.
func WithRESTConfig(cfg *rest.Config) Option { return func(c *Collector) { c.rest = cfg } }

// WithClock replaces time.Now as the collector's clock.
func WithClock(now func() time.Time) Option { return func(c *Collector) { c.now = now } }

// WithWatchTimeout sets how long one watch request lasts before the collector
// opens the next (default DefaultWatchTimeout). A request ends after between
// one and two times d.
func WithWatchTimeout(d time.Duration) Option { return func(c *Collector) { c.watchTimeout = d } }

// WithBatchWindow sets how long, at most, a watch event waits for others to
// be recorded in the same input (default DefaultBatchWindow). An event that
// comes after a quiet spell of d is recorded at once; while events keep
// coming, the collector records at most one input per d. Every input costs a
// commit, and much of a commit's cost is the same whatever it holds, so at
// the steady trickle of a cluster's node heartbeats this more than halves
// leasewatch's CPU per renewal, for at most d more lag. 0 records each
// event, with those that arrived while the last input was stored, at once.
// When events come too slowly to fill a window with about 50, the window
// stretches, up to twice d (see stretch in run.go).
// While d is not 0, reads of the apiserver connection are also paced to one
// short read per d/2 (see pacedDialer), for up to d/2 more lag.
func WithBatchWindow(d time.Duration) Option { return func(c *Collector) { c.batchWindow = d } }

// clientQPS and clientBurst limit the collector's requests to the
// apiserver when the client configuration sets no limit, as kubectl's own
// defaults do: a list of 130,000 Leases, 260 pages, takes about 4 s of
// requests, and a watch or a probe a request each.
const (
	clientQPS   = 50
	clientBurst = 100
)

// Collector watches the Leases of one Kubernetes cluster. It implements
// collectors.Collector.
type Collector struct {
	cfg          Config
	rest         *rest.Config
	client       clientset.Interface
	scopes       []string        // namespaces with one watch each; [""] for all
	heartbeatNS  map[string]bool // namespaces whose Leases are heartbeats
	now          func() time.Time
	watchTimeout time.Duration
	batchWindow  time.Duration
	// snapshotChunk: a first snapshot records this many held Leases an
	// input (see listing.recordAhead); listPage, how many Leases a page of
	// a list brings.
	snapshotChunk int
	listPage      int
	log           *slog.Logger
}

var _ collectors.Collector = (*Collector)(nil)

// New validates cfg, loads its client configuration and returns a collector
// for it. It does not contact the cluster. Errors name the offending field
// (EINVALID); the caller adds which source. logger should already carry the
// source's name (logger.With("source", name)).
func New(cfg Config, logger *slog.Logger, opts ...Option) (*Collector, error) {
	c := &Collector{cfg: cfg, now: time.Now, watchTimeout: DefaultWatchTimeout, batchWindow: DefaultBatchWindow, snapshotChunk: snapshotChunk, listPage: listPageSize}
	for _, opt := range opts {
		opt(c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.rest == nil {
		rc, err := LoadRESTConfig(cfg.Kubeconfig, cfg.Context)
		if err != nil {
			return nil, err
		}
		c.rest = rc
	}
	rc := rest.CopyConfig(c.rest)
	if rc.UserAgent == "" {
		rc.UserAgent = "leasewatch"
	}
	if rc.ContentType == "" {
		// Leases are built-in types: protobuf halves the bytes per event.
		rc.ContentType = "application/vnd.kubernetes.protobuf"
		rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	if rc.QPS == 0 && rc.Burst == 0 && rc.RateLimiter == nil {
		// client-go's default, 5 requests a second, lists a 130,000-node
		// cluster's Leases (260 pages) in 52 s, longer than a node Lease
		// lasts (40 s): the snapshot found every Lease run out.
		rc.QPS, rc.Burst = clientQPS, clientBurst
	}
	if c.batchWindow > 0 {
		rc.Dial = pacedDialer(rc.Dial, c.batchWindow/2)
	}
	client, err := clientset.NewForConfig(rc)
	if err != nil {
		return nil, audit.Errorf(audit.EINVALID, "kubeconfig: %v", err)
	}
	c.client = client

	c.scopes = dedupe(cfg.Namespaces)
	if len(c.scopes) == 0 {
		c.scopes = []string{""}
	}
	hb := cfg.HeartbeatNamespaces
	if hb == nil {
		hb = []string{NamespaceNodeLease}
	}
	c.heartbeatNS = make(map[string]bool, len(hb))
	for _, ns := range hb {
		c.heartbeatNS[ns] = true
	}
	if c.watchTimeout <= 0 {
		c.watchTimeout = DefaultWatchTimeout
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c.log = logger
	return c, nil
}

func (c *Collector) validate() error {
	cfg := c.cfg
	if strings.TrimSpace(cfg.Name) == "" {
		return audit.Errorf(audit.EINVALID, "name: required")
	}
	if c.rest != nil && (cfg.Kubeconfig != "" || cfg.Context != "") {
		return audit.Errorf(audit.EINVALID, "kubeconfig: must be empty when a client configuration is given")
	}
	for i, ns := range cfg.Namespaces {
		if err := checkNamespace(ns); err != nil {
			return audit.Errorf(audit.EINVALID, "namespaces[%d]: %v", i, err)
		}
	}
	for i, ns := range cfg.HeartbeatNamespaces {
		if err := checkNamespace(ns); err != nil {
			return audit.Errorf(audit.EINVALID, "heartbeat_namespaces[%d]: %v", i, err)
		}
	}
	return nil
}

// checkNamespace accepts a namespace name: a DNS-1123 label.
func checkNamespace(ns string) error {
	switch {
	case ns == "":
		return errors.New("empty (leave namespaces empty to watch them all)")
	case len(ns) > 63:
		return fmt.Errorf("%q is longer than 63 characters", ns)
	}
	for i, r := range ns {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' && i > 0 && i < len(ns)-1
		if !ok {
			return fmt.Errorf("%q is not a namespace name (lower-case letters, digits and inner dashes)", ns)
		}
	}
	return nil
}

// LoadRESTConfig loads a client configuration the way kubectl does: an
// explicit kubeconfig path, else KUBECONFIG and ~/.kube/config, else the
// in-cluster service account.
func LoadRESTConfig(kubeconfig, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		path, err := expandHome(kubeconfig)
		if err != nil {
			return nil, audit.Errorf(audit.EINVALID, "kubeconfig: %v", err)
		}
		if _, err := os.Stat(path); err != nil {
			return nil, audit.Errorf(audit.EINVALID, "kubeconfig: %v", err)
		}
		rules.ExplicitPath = path
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	if kubeContext != "" {
		raw, err := loader.RawConfig()
		if err != nil {
			return nil, audit.Errorf(audit.EINVALID, "kubeconfig: %v", err)
		}
		if _, ok := raw.Contexts[kubeContext]; !ok {
			return nil, audit.Errorf(audit.EINVALID, "context: %q is not in the kubeconfig", kubeContext)
		}
	}
	rc, err := loader.ClientConfig()
	switch {
	case clientcmd.IsEmptyConfig(err):
		return nil, audit.Errorf(audit.EINVALID, "kubeconfig: none found (no KUBECONFIG, no ~/.kube/config) and not running in a cluster")
	case err != nil:
		return nil, audit.Errorf(audit.EINVALID, "kubeconfig: %v", err)
	}
	return rc, nil
}

// expandHome replaces a leading ~ with the user's home directory.
func expandHome(path string) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("expand %s: %w", path, err)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}

func dedupe(ss []string) []string {
	var out []string
	seen := make(map[string]bool, len(ss))
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Name is the source's configured name.
func (c *Collector) Name() string { return c.cfg.Name }

// Kind is audit.KindKubernetes.
func (c *Collector) Kind() audit.SourceKind { return audit.KindKubernetes }

// Run watches the Leases until ctx ends (returning nil) or the apiserver
// fails in a way the watch cannot resume from (returning the error, for the
// Runner to restart it). It calls ready once its starting snapshot is
// durable, or, on a resume from the stored cursor, once its watches are open.
func (c *Collector) Run(ctx context.Context, sink collectors.Sink, ready func()) error {
	err := newRun(c, sink).run(ctx, ready)
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("watch ended")
	}
	return err
}
