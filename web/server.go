// Package web serves leasewatch over HTTP: the server-rendered dashboard, the
// JSON API (docs/http-api.md), write-report ingest, health probes and
// Prometheus metrics.
//
// Handlers are thin: they parse the request, call the query layer
// (audit/query), an incident review or the WriteReporter, have web/present
// shape what was read, and render. Errors travel back to one HTTP error
// handler, which maps audit error codes to statuses (error.go).
//
// JSON conventions: times are RFC 3339 with nanoseconds in UTC and null when
// unknown; tokens and durations (fields ending in _ms, integer milliseconds) are
// null when unknown; detail is an object or null; strings are never null (an
// unknown holder, position or resource is "").
package web

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/semaphore"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/static"
	"github.com/leasewatch/leasewatch/web/present"
)

// DefaultGroupExposuresUnder is how short an exposure must be for the lists
// to fold it with the lock's other short exposures to the same resource:
// exposures of a few milliseconds come with every handover a resource
// learns of promptly, and would bury the findings that matter.
const DefaultGroupExposuresUnder = time.Second

// WriteReporter records write reports from protected resources and the
// beliefs of holders. *audit.Recorder implements it.
type WriteReporter interface {
	// ReportWrites records reports and returns once they are durable. It
	// returns an *audit.Error with EUNAVAILABLE when it cannot take writes.
	ReportWrites(ctx context.Context, reports []audit.WriteReport) error
	// ReportBeliefs judges holders' beliefs and returns once what they
	// showed is durable, failing as ReportWrites does.
	ReportBeliefs(ctx context.Context, beliefs []audit.Belief) error
}

// pageStore is what the handlers read of the store themselves, besides what
// they ask the query layer (query.Reader, over the whole Config.Store): an
// incident review's reads (review.Store), and an alert's lock by its key.
// Each method is audit.Store's of the same name, documented there;
// declaring only these keeps a method added to audit.Store for another
// reader out of what the handlers depend on.
type pageStore interface {
	review.Store
	LockByKey(ctx context.Context, key audit.LockKey) (audit.Lock, error)
}

// The store a Server is given serves its handlers' own reads.
var _ pageStore = audit.Reads(nil)

// Config is what a Server needs. Only Store is required.
type Config struct {
	// Store answers every read, with current renewals: the recorder's
	// Fresh, or audit.Settled for a store nothing records into. The
	// query layer reads it whole; the handlers read only pageStore's methods.
	Store audit.Reads
	// Writes takes POST /api/v1/writes reports and POST /api/v1/beliefs.
	// Nil answers 503.
	Writes WriteReporter
	// Sources returns the configured sources with their collectors' health.
	// LastEventAt is completed from Store.LastEventAt. Nil lists KnownSources
	// as down: no collector runs for them.
	Sources func() []audit.Source
	// KnownSources are the configured sources by name; ingest accepts reports
	// only for these.
	KnownSources map[string]audit.SourceKind
	// Kinds are the source kinds leasewatch speaks, which the locks list's
	// kind filter offers and takes. Nil: the kinds of KnownSources.
	Kinds []audit.SourceKind
	// IngestTokens are the bearer tokens POST /api/v1/writes accepts. With none,
	// every report is refused.
	IngestTokens []string
	// Registry receives the server's metrics and is served at /metrics. Nil
	// uses a new registry.
	Registry *prometheus.Registry
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Ready answers /readyz: nil means ready. Nil Ready is always ready.
	Ready func(ctx context.Context) error
	// Now is the clock for receipt times and "expires in"; default time.Now.
	Now func() time.Time
	// RenewMarginRatio marks a held lock "near expiry" on pages when less than
	// this fraction of its lease is left (alerts.renew_margin_ratio). Zero
	// disables the hint.
	RenewMarginRatio float64
	// Alerts returns the live alerts firing now and those resolved lately,
	// newest first, for the alerts page. Nil shows none.
	Alerts func() (firing, resolved []alert.Alert)
	// Auth guards the dashboard and the read API; the zero value leaves them
	// open.
	Auth Auth
	// TLS, when set, makes Serve speak HTTPS (see TLSConfig).
	TLS *tls.Config
	// Timeouts bound how long Serve waits on a client; zero fields take
	// the defaults.
	Timeouts Timeouts
	// Purposes say which locks only avoid duplicate work, for their safety
	// verdicts (config purposes:); a lock none names is for correctness.
	Purposes verdict.Purposes
	// GroupExposuresUnder folds, in the findings lists, the exposures
	// shorter than it of one lock and resource into one row (config
	// dashboard.group_exposures_under). Zero: DefaultGroupExposuresUnder;
	// negative: every exposure on its own row.
	GroupExposuresUnder time.Duration
	// Clocks are the holders' clock estimates the tracker keeps, for
	// /clocks and /api/v1/clocks. Nil lists none.
	Clocks *audit.HolderClocks
}

// Timeouts bound how long the HTTP server waits on a client, so that slow or
// stalled clients (slowloris) cannot hold connections open. A zero field
// takes its default.
type Timeouts struct {
	// ReadHeader is how long a client may take to send a request's headers
	// (default 10s).
	ReadHeader time.Duration
	// Read is how long a client may take to send a whole request, body
	// included (default 1m: a 1 MiB ingest body from a slow client).
	Read time.Duration
	// Write is how long the server may take to write a response (default
	// 1m: the slowest page or /metrics scrape).
	Write time.Duration
	// Idle is how long a keep-alive connection may wait for its next
	// request (default 2m).
	Idle time.Duration
}

// withDefaults returns t with its zero fields set to the defaults.
func (t Timeouts) withDefaults() Timeouts {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&t.ReadHeader, readHeaderTimeout}, {&t.Read, readTimeout}, {&t.Write, writeTimeout}, {&t.Idle, idleTimeout}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return t
}

// Default timeouts of the HTTP server (see Timeouts).
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute
	writeTimeout      = time.Minute
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 15 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Server is leasewatch's HTTP server.
type Server struct {
	store   pageStore
	writes  WriteReporter
	sources func() []audit.Source
	known   map[string]audit.SourceKind
	kinds   []audit.SourceKind // sorted
	tokens  [][32]byte         // SHA-256 of each ingest token
	ready   func(ctx context.Context) error
	now     func() time.Time
	margin  float64
	alerts  func() (firing, resolved []alert.Alert)
	logger  *slog.Logger
	metrics *metrics
	auth    *authenticator // nil: open
	hosts   *hostCheck     // nil: any Host
	tls     *tls.Config
	timeout Timeouts
	reviews *semaphore.Weighted // the incident reviews built at once
	// reviewWrites keeps the write reports reviews read, for the next.
	reviewWrites *review.WriteCache
	query        *query.Reader
	clocks       *audit.HolderClocks
	// pages shapes the pages from what query reads.
	pages present.Pages
	echo  *echo.Echo
}

// New returns a Server for cfg with its routes and metrics registered.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("web: Config.Store is required")
	}
	if cfg.RenewMarginRatio < 0 || cfg.RenewMarginRatio >= 1 {
		return nil, fmt.Errorf("web: RenewMarginRatio %v: want 0 <= ratio < 1", cfg.RenewMarginRatio)
	}
	s := &Server{
		store:   cfg.Store,
		writes:  cfg.Writes,
		sources: cfg.Sources,
		known:   cfg.KnownSources,
		kinds:   kindsOf(cfg),
		ready:   cfg.Ready,
		now:     cfg.Now,
		margin:  cfg.RenewMarginRatio,
		alerts:  cfg.Alerts,
		logger:  cfg.Logger,
		tls:     cfg.TLS,
		timeout: cfg.Timeouts.withDefaults(),
		reviews: semaphore.NewWeighted(reviewTurns),

		reviewWrites: review.NewWriteCache(reviewCacheWrites),
		clocks:       cfg.Clocks,

		pages: present.Pages{RenewMargin: cfg.RenewMarginRatio,
			GroupExposuresUnder: cmp.Or(cfg.GroupExposuresUnder, DefaultGroupExposuresUnder)},
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.query = query.New(query.Config{Store: cfg.Store, Sources: cfg.Sources, KnownSources: cfg.KnownSources,
		RenewMarginRatio: cfg.RenewMarginRatio, Purposes: cfg.Purposes, Logger: s.logger})
	for _, t := range cfg.IngestTokens {
		if t != "" { // an empty token would let an empty Authorization through
			s.tokens = append(s.tokens, hashToken(t))
		}
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if s.auth, err = newAuthenticator(cfg.Auth, s.logger, s.now, m.authFailures); err != nil {
		return nil, err
	}
	s.hosts = newHostCheck(cfg.Auth, s.logger, s.now)

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	// Headers first, so that a refusal carries them too.
	e.Use(s.instrument, s.recoverPanic, secureHeaders, watchBody)
	if s.hosts != nil {
		e.Use(s.hosts.middleware)
	}
	if s.auth != nil {
		e.Use(s.auth.middleware)
	}

	s.routes(e, reg)

	s.echo = e
	return s, nil
}

// routes registers every page, probe and API route on e, and /metrics
// serving reg.
func (s *Server) routes(e *echo.Echo, reg *prometheus.Registry) {
	e.Match(getHead, "/", s.handleOverview)
	e.Match(getHead, "/locks", s.handleLocksPage)
	e.Match(getHead, "/locks/:id", s.handleLockPage)
	e.Match(getHead, "/holders/:holder", s.handleHolderPage)
	e.Match(getHead, "/findings", s.handleFindingsPage)
	e.Match(getHead, "/sources", s.handleSourcesPage)
	e.Match(getHead, "/clocks", s.handleClocksPage)
	e.Match(getHead, "/alerts", s.handleAlertsPage)
	e.Match(getHead, "/review", s.handleReviewPage)
	e.Match(getHead, "/review.md", s.handleReviewMarkdown)
	e.Match(getHead, "/review.json", s.handleReviewJSON)
	e.Match(getHead, "/static/*", echo.StaticDirectoryHandler(static.FS, !e.EnablePathUnescapingStaticFiles))

	e.Match(getHead, "/healthz", s.handleHealthz)
	e.Match(getHead, "/readyz", s.handleReadyz)
	// A collector that fails costs its own series, logged, never the scrape
	// (nor a 500 whose body would show its error to anyone).
	e.Match(getHead, "/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})))

	api := e.Group("/api/v1")
	api.Match(getHead, "/openapi.json", s.handleOpenAPI)
	api.Match(getHead, "/sources", s.handleAPISources)
	api.Match(getHead, "/locks", s.handleAPILocks)
	api.Match(getHead, "/locks/:id", s.handleAPILock)
	api.Match(getHead, "/locks/:id/events", s.handleAPIEvents)
	api.Match(getHead, "/locks/:id/tenures", s.handleAPITenures)
	api.Match(getHead, "/locks/:id/verdict", s.handleAPIVerdict)
	api.Match(getHead, "/locks/:id/advice", s.handleAPIAdvice)
	api.Match(getHead, "/locks/:id/recheck", s.handleAPIRecheck)
	api.Match(getHead, "/locks/:id/at", s.handleAPILockAt)
	api.Match(getHead, "/holders/:holder/tenures", s.handleAPIHolderTenures)
	api.Match(getHead, "/findings", s.handleAPIFindings)
	api.Match(getHead, "/costs", s.handleAPICosts)
	api.Match(getHead, "/clocks", s.handleAPIClocks)
	api.POST("/writes", s.handleIngest)
	api.POST("/beliefs", s.handleBeliefs)
}

// getHead are the methods of every read: HEAD works wherever GET does (RFC
// 9110 9.3.2), for probes and link checkers, and net/http drops the body of
// a HEAD answer.
var getHead = []string{http.MethodGet, http.MethodHead}

// Handler returns the server's HTTP handler, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.echo }

// ListenAndServe listens on addr and serves until ctx ends, then shuts down
// gracefully.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then stops accepting connections and waits
// up to shutdownTimeout for requests in flight. It returns nil after a
// graceful shutdown. Serve closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: s.timeout.ReadHeader,
		ReadTimeout:       s.timeout.Read,
		WriteTimeout:      s.timeout.Write,
		IdleTimeout:       s.timeout.Idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	if s.tls != nil {
		srv.TLSConfig = s.tls.Clone()
		s.logger.Info("https server listening", "addr", ln.Addr().String())
		// The certificate comes from TLSConfig, so no file names here.
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		s.logger.Info("http server listening", "addr", ln.Addr().String())
		go func() { errc <- srv.Serve(ln) }()
	}

	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		<-errc
		return fmt.Errorf("shut down http server: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}

func (s *Server) handleHealthz(c echo.Context) error {
	return c.String(http.StatusOK, "ok\n")
}

func (s *Server) handleReadyz(c echo.Context) error {
	if s.ready != nil {
		if err := s.ready(c.Request().Context()); err != nil {
			return c.String(http.StatusServiceUnavailable, "not ready: "+err.Error()+"\n")
		}
	}
	return c.String(http.StatusOK, "ready\n")
}

// recoverPanic turns a handler panic into a 500 so one bad request does not
// take the process down.
func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic serving %s %s: %v", c.Request().Method, c.Path(), r)
			}
		}()
		return next(c)
	}
}

// watchBody lets the error handler tell a request whose body stopped
// coming from one whose client went away (bodyTimedOut).
func watchBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if req := c.Request(); req.Body != nil && req.Body != http.NoBody {
			req.Body = &bodyReader{ReadCloser: req.Body}
		}
		return next(c)
	}
}

// bodyReader is a request body that remembers its first read error.
type bodyReader struct {
	io.ReadCloser
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// timedOut reports whether reading the body failed on the connection's read
// deadline (the server's read timeout).
func (b *bodyReader) timedOut() bool {
	var ne net.Error
	return errors.As(b.err, &ne) && ne.Timeout()
}

// kindsOf returns cfg.Kinds, or the kinds of cfg.KnownSources, sorted.
func kindsOf(cfg Config) []audit.SourceKind {
	kinds := slices.Clone(cfg.Kinds)
	if kinds == nil {
		for _, k := range cfg.KnownSources {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	return slices.Compact(kinds)
}
