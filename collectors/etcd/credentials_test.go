package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"golang.org/x/crypto/bcrypt"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
	"github.com/leasewatch/leasewatch/collectors/faulttest"
	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// startEtcdWithAuth runs an etcd with authentication enabled: user root
// (role root) and user leasewatch with password, whose role may only read
// the keys under /locks/ (all the collector needs), and user outsider,
// whose role may only read /other/. It returns the endpoint and a client
// logged in as root.
func startEtcdWithAuth(t *testing.T, password string) (string, *clientv3.Client) {
	t.Helper()
	ep := startEtcdWith(t, embedded.Options{BcryptCost: uint(bcrypt.MinCost)})
	setup := newClient(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []struct {
		what string
		do   func() error
	}{
		{"add root", func() error { _, err := setup.UserAdd(ctx, "root", "root-"+password); return err }},
		{"grant root", func() error { _, err := setup.UserGrantRole(ctx, "root", "root"); return err }},
		{"add role lock-reader", func() error { _, err := setup.RoleAdd(ctx, "lock-reader"); return err }},
		{"let lock-reader read /locks/", func() error {
			_, err := setup.RoleGrantPermission(ctx, "lock-reader", "/locks/", clientv3.GetPrefixRangeEnd("/locks/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		}},
		{"add leasewatch", func() error { _, err := setup.UserAdd(ctx, "leasewatch", password); return err }},
		{"grant leasewatch", func() error { _, err := setup.UserGrantRole(ctx, "leasewatch", "lock-reader"); return err }},
		{"add role other-reader", func() error { _, err := setup.RoleAdd(ctx, "other-reader"); return err }},
		{"let other-reader read /other/", func() error {
			_, err := setup.RoleGrantPermission(ctx, "other-reader", "/other/", clientv3.GetPrefixRangeEnd("/other/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		}},
		{"add outsider", func() error { _, err := setup.UserAdd(ctx, "outsider", password); return err }},
		{"grant outsider", func() error { _, err := setup.UserGrantRole(ctx, "outsider", "other-reader"); return err }},
		{"enable auth", func() error { _, err := setup.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Username: "root", Password: "root-" + password, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("log in as root: %v", err)
	}
	t.Cleanup(func() { root.Close() })
	return ep, root
}

// TestAuthUserWithReadRole records a grant as an etcd user whose role may
// only read the lock prefix, and checks that wrong or missing credentials
// and a role without the prefix stop Run with an error that says why.
func TestAuthUserWithReadRole(t *testing.T) {
	t.Parallel()
	const password = "lw-etcd-pass-91c2"
	ep, root := startEtcdWithAuth(t, password)
	cfg := testConfig([]string{"/locks/"}, ep)
	cfg.Username, cfg.Password = "leasewatch", collectors.Password(password)

	t.Run("Recorded", func(t *testing.T) {
		rec := newRecorder()
		c, err := New(cfg, collectortest.Logger(t, testSource), WithProgressInterval(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		collectortest.Run(t, c, rec)
		s := newSession(t, root, 5)
		m := lockMutex(t, s, "/locks/orders")
		want := token(t, root, m.Key())
		g := rec.waitObs(t, 10*time.Second, "/locks/orders", 1, audit.EventGrant)[0]
		if g.Holder != leaseHolder(s) || tokenOf(g) != want {
			t.Fatalf("grant = %+v, want holder %s with token %d", g, leaseHolder(s), want)
		}
		// Renewals come from LeaseTimeToLive, which the read role allows.
		rec.waitObs(t, 10*time.Second, "/locks/orders", 1, audit.EventRenew)
		rel := unlock(t, root, m)
		rec.waitCursor(t, rel)
		if r := rec.obs("/locks/orders", audit.EventRelease); len(r) != 1 {
			t.Fatalf("releases = %+v, want one", r)
		}
	})

	// The password is rotated while the collector runs: etcd refuses the
	// old one from the collector's next call (Run fails, and the Runner
	// restarts it), and the next Run connects with the file's new password.
	t.Run("RotatedPasswordFile", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "password")
		write := func(pw string) {
			t.Helper()
			if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(password)
		fromFile := cfg
		fromFile.Password = collectors.PasswordFile(path)
		c, err := New(fromFile, collectortest.Logger(t, testSource))
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		cr := collectortest.Run(t, c, rec)

		const rotated = "lw-etcd-pass-rotated-5e07"
		ctx := context.Background()
		setPassword := func(pw string) {
			t.Helper()
			if _, err := root.UserChangePassword(ctx, "leasewatch", pw); err != nil {
				t.Fatal(err)
			}
		}
		setPassword(rotated)
		t.Cleanup(func() { setPassword(password) })
		write(rotated)
		// The watch may outlive the old token; the first call the collector
		// makes for a new holder (its lease's TTL) cannot.
		s := newSession(t, root, 5)
		m := lockMutex(t, s, "/locks/rotated")
		// The old token refused on the watch stream, or the old password
		// refused when the client logs in again for a call.
		if err := cr.Failed(t, 15*time.Second); err == nil ||
			!slices.ContainsFunc([]string{"invalid auth token", "authentication failed"}, func(w string) bool { return strings.Contains(err.Error(), w) }) {
			t.Fatalf("Run after the rotation: err = %v, want the old token or password refused", err)
		}

		// Resumed from its cursor, the collector sees the grant it missed.
		collectortest.Run(t, c, rec)
		if g := rec.waitObs(t, 10*time.Second, "/locks/rotated", 1, audit.EventGrant)[0]; g.Holder != leaseHolder(s) {
			t.Fatalf("grant = %+v, want %s's", g, leaseHolder(s))
		}
		unlock(t, root, m)

		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		err = c.Run(runCtx, newRecorder(), func() { t.Error("collector ready without its password file") })
		if err == nil || !strings.Contains(err.Error(), "password file: open "+path) {
			t.Fatalf("Run without the password file: err = %v, want one naming the file", err)
		}
	})

	for _, tt := range []struct {
		name, user, password, want string
	}{
		{"WrongPassword", "leasewatch", "not-" + password, "authentication failed"},
		{"UnknownUser", "nobody", password, "authentication failed"},
		{"NoCredentials", "", "", "user name is empty"},
		{"RoleWithoutThePrefix", "outsider", password, "permission denied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := cfg
			bad.Username, bad.Password = tt.user, collectors.Password(tt.password)
			c, err := New(bad, collectortest.Logger(t, testSource))
			if err != nil {
				t.Fatal(err)
			}
			err = refusedRun(t, c, "with credentials that cannot read /locks/")
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run: err = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("Run: err = %v shows the password", err)
			}
		})
	}
}

// TestTLSWithClientCertificate records a grant from an etcd that serves
// clients over TLS and requires a client certificate, and checks that a
// missing or untrusted certificate, an untrusted server and plain text stop
// Run with an error that says why, within the dial timeout.
func TestTLSWithClientCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "etcd")
	server := ca.Server(t, "etcd-server")
	client := ca.Client(t, "leasewatch")
	ep := startEtcdWith(t, embedded.Options{TLS: &embedded.TLS{CertFile: server.CertFile, KeyFile: server.KeyFile, ClientCAFile: ca.CertFile}})
	if !strings.HasPrefix(ep, "https://") {
		t.Fatalf("endpoint = %s, want https://", ep)
	}
	cfg := testConfig([]string{"/locks/"}, ep)
	clientTLS := testcert.ClientTLS(t, ca, client)
	cfg.TLS = collectors.StaticTLS(clientTLS)

	t.Run("Recorded", func(t *testing.T) {
		locker, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, TLS: clientTLS, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { locker.Close() })
		rec := newRecorder()
		c, err := New(cfg, collectortest.Logger(t, testSource), WithProgressInterval(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		collectortest.Run(t, c, rec)
		s := newSession(t, locker, 5)
		m := lockMutex(t, s, "/locks/tls")
		want := token(t, locker, m.Key())
		g := rec.waitObs(t, 10*time.Second, "/locks/tls", 1, audit.EventGrant)[0]
		if g.Holder != leaseHolder(s) || tokenOf(g) != want {
			t.Fatalf("grant = %+v, want holder %s with token %d", g, leaseHolder(s), want)
		}
	})

	// The collector asks for its TLS configuration on each connect: after
	// a handshake the old trust fails (a server certificate moved to a new
	// CA), its next Run trusts what the configuration gives then.
	other := testcert.NewCA(t, dir, "other")
	t.Run("AskedOnEachConnect", func(t *testing.T) {
		var trusted atomic.Pointer[tls.Config]
		trusted.Store(testcert.ClientTLS(t, other, client))
		rotating := cfg
		rotating.TLS = func() (*tls.Config, error) { return trusted.Load(), nil }
		c, err := New(rotating, collectortest.Logger(t, testSource))
		if err != nil {
			t.Fatal(err)
		}
		if err := refusedRun(t, c, "over an untrusted server"); !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Fatalf("Run trusting another CA: err = %v, want an unknown authority", err)
		}
		trusted.Store(clientTLS)
		rec := newRecorder()
		collectortest.Run(t, c, rec)
		locker, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, TLS: clientTLS, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { locker.Close() })
		m := lockMutex(t, newSession(t, locker, 5), "/locks/tls-rotated")
		if g := rec.waitObs(t, 10*time.Second, "/locks/tls-rotated", 1, audit.EventGrant)[0]; tokenOf(g) != token(t, locker, m.Key()) {
			t.Fatalf("grant = %+v, want the mutex's token", g)
		}
	})

	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   []string // one of
	}{
		// In TLS 1.3 the server refuses a missing certificate after the
		// client has finished its handshake: the client reads the alert,
		// or, when its first write races it, finds the connection closed.
		{"NoClientCertificate", func(c *Config) { c.TLS = collectors.StaticTLS(testcert.ClientTLS(t, ca, testcert.Pair{})) },
			[]string{"tls: certificate required", "broken pipe", "connection reset by peer"}},
		// etcd names the CAs it accepts, and crypto/tls sends no certificate
		// that none of them signed.
		{"ClientCertificateOfAnotherCA", func(c *Config) {
			c.TLS = collectors.StaticTLS(testcert.ClientTLS(t, ca, other.Client(t, "leasewatch")))
		},
			[]string{"tls: certificate required", "broken pipe", "connection reset by peer"}},
		{"ServerNotTrusted", func(c *Config) { c.TLS = collectors.StaticTLS(testcert.ClientTLS(t, other, client)) }, []string{"certificate signed by unknown authority"}},
		{"PlainText", func(c *Config) { c.TLS = nil; c.Endpoints = []string{strings.Replace(ep, "https://", "http://", 1)} }, []string{"error reading server preface"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := cfg
			tt.change(&bad)
			c, err := New(bad, collectortest.Logger(t, testSource))
			if err != nil {
				t.Fatal(err)
			}
			err = refusedRun(t, c, "over a refused connection")
			if !slices.ContainsFunc(tt.want, func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Fatalf("Run: err = %v, want one containing one of %q", err, tt.want)
			}
		})
	}
}

// refusedRun runs c once, as a collector that must not get ready (ready
// says how), and returns Run's error: there must be one within 15s.
func refusedRun(t *testing.T, c *Collector, ready string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	err := c.Run(ctx, newRecorder(), func() { t.Errorf("collector ready %s", ready) })
	t.Logf("Run after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		t.Fatal("Run returned nil, want an error (or it ran 15s)")
	}
	return err
}

func TestNewValidatesCredentials(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"UserWithoutPassword", Config{Username: "leasewatch"}, "password: required with a username"},
		{"TLSToHTTPEndpoint", Config{Endpoints: []string{"etcd-0:2379", "http://etcd-1:2379"}, TLS: collectors.StaticTLS(&tls.Config{})}, "endpoints[1]: http://etcd-1:2379 is plain text"},
		{"TLSToUnixEndpoint", Config{Endpoints: []string{"unix://etcd.sock"}, TLS: collectors.StaticTLS(&tls.Config{})}, "endpoints[0]: unix://etcd.sock is plain text"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Name, cfg.Prefixes = "prod-etcd", []string{"/locks/"}
			if cfg.Endpoints == nil {
				cfg.Endpoints = []string{"127.0.0.1:2379"}
			}
			_, err := New(cfg, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || audit.ErrorCode(err) != audit.EINVALID {
				t.Fatalf("New: err = %v, want an invalid-input error starting %q", err, tt.want)
			}
		})
	}
	// With TLS, https:// and scheme-less endpoints are fine.
	if _, err := New(Config{Name: "e", Endpoints: []string{"https://etcd-0:2379", "etcd-1:2379"}, Prefixes: []string{"/locks/"}, TLS: collectors.StaticTLS(&tls.Config{})}, nil); err != nil {
		t.Fatalf("New with TLS to https:// and bare endpoints: %v", err)
	}
}

// TestTLSCARotatedWhileRunning moves etcd's serving certificate to a new CA
// across a restart while the Runner keeps the collector going, and the
// source's TLS trusts the new CA from then on: the collector, which failed
// as in any outage, reconnects with the configuration it asks for anew and
// records the next grant.
func TestTLSCARotatedWhileRunning(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := testcert.NewCA(t, dir, "etcd-old"), testcert.NewCA(t, dir, "etcd-new")
	serving := testcert.Pair{CertFile: filepath.Join(dir, "serving.crt"), KeyFile: filepath.Join(dir, "serving.key")}
	install := func(p testcert.Pair) {
		t.Helper()
		testcert.Install(t, serving.CertFile, p.CertFile)
		testcert.Install(t, serving.KeyFile, p.KeyFile)
	}
	install(oldCA.Server(t, "etcd-server"))
	srv := startEtcdProcessTLS(t, serving.CertFile, serving.KeyFile)

	// The lock holders trust both CAs; the collector, only the current one.
	both := x509.NewCertPool()
	for _, ca := range []*testcert.CA{oldCA, newCA} {
		data, err := os.ReadFile(ca.CertFile)
		if err != nil || !both.AppendCertsFromPEM(data) {
			t.Fatalf("read %s: %v", ca.CertFile, err)
		}
	}
	locker, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.endpoint}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: both, MinVersion: tls.VersionTLS12}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locker.Close() })
	var trusted atomic.Pointer[tls.Config]
	trusted.Store(testcert.ClientTLS(t, oldCA, testcert.Pair{}))
	cfg := testConfig([]string{"/locks/"}, srv.endpoint)
	cfg.TLS = func() (*tls.Config, error) { return trusted.Load(), nil }
	c, err := New(cfg, collectortest.Logger(t, testSource), WithProgressInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	faulttest.Supervise(t, rec, c, collectors.RunnerConfig{
		Logger: collectortest.Logger(t, testSource), MinBackoff: 100 * time.Millisecond, MaxBackoff: faultBackoffCap,
	})
	grant := func(name string) {
		t.Helper()
		m := lockMutex(t, newSession(t, locker, 10), name)
		want := token(t, locker, m.Key())
		if g := rec.waitObs(t, faultBackoffCap+faultSlack+5*time.Second, name, 1, audit.EventGrant)[0]; tokenOf(g) != want {
			t.Fatalf("grant of %s = %+v, want token %d", name, g, want)
		}
	}
	grant("/locks/before-rotation")

	srv.stop()
	install(newCA.Server(t, "etcd-server"))
	trusted.Store(testcert.ClientTLS(t, newCA, testcert.Pair{}))
	srv.start()
	grant("/locks/after-rotation")
}
