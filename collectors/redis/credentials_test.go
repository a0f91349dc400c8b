package redis

import (
	"context"
	"crypto/tls"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// tlsRedis is a redis-server that serves TLS on a loopback port, requires a
// client certificate signed by ca, and has the ACL user leasewatch with
// password and the rules ACLRules gives for cfg.
type tlsRedis struct {
	*redisServer
	addr       string
	ca         *testcert.CA
	cert       testcert.Pair // a client certificate
	serverCert testcert.Pair
}

func startTLSRedis(t *testing.T, password string, cfg Config) *tlsRedis {
	t.Helper()
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "redis")
	server := ca.Server(t, "redis-server")
	port := freePort(t)
	srv := startRedis(t,
		"tls-port "+port,
		"tls-cert-file "+server.CertFile,
		"tls-key-file "+server.KeyFile,
		"tls-ca-cert-file "+ca.CertFile,
		"tls-auth-clients yes",
		"notify-keyspace-events Kg$hxe",
		"user leasewatch on >"+password+" "+ACLRules(cfg),
	)
	return &tlsRedis{redisServer: srv, addr: "127.0.0.1:" + port, ca: ca, cert: ca.Client(t, "leasewatch"), serverCert: server}
}

// recordsAcrossRotation runs a collector with cfg and checks that it
// records a grant, then that it records another after rotate (given a
// client of the server's plain port) changes a credential while it runs
// and the server drops the user's connections: the collector's new
// connections must use what the configuration gives then.
func (srv *tlsRedis) recordsAcrossRotation(t *testing.T, cfg Config, rotate func(cli *goredis.Client)) {
	t.Helper()
	sk := newSink(t)
	runCollector(t, cfg, sk)
	ctx := context.Background()
	cli := srv.client(t)
	grant := func(lock, holder string, timeout time.Duration) {
		t.Helper()
		if err := cli.Eval(ctx, AcquireScript, []string{lock, lock + ":fence"}, holder, 60000).Err(); err != nil {
			t.Fatal(err)
		}
		sk.WaitEvents(t, timeout, lock, 1, audit.EventGrant)
	}
	lock := "lock:" + path.Base(t.Name()) // one per subtest: the locks stay held
	grant(lock+"-before", "holder-a", 5*time.Second)
	rotate(cli)
	killed, err := cli.Do(ctx, "CLIENT", "KILL", "USER", "leasewatch").Int()
	if err != nil || killed == 0 {
		t.Fatalf("CLIENT KILL USER leasewatch = %d, %v; want the collector's connections closed", killed, err)
	}
	grant(lock+"-after", "holder-b", 10*time.Second)
}

// TestTLSClientCertAndACLUser records a fenced grant through TLS with a
// client certificate, as an ACL user limited to ACLRules, and checks that
// wrong credentials stop Run with an error that says why.
func TestTLSClientCertAndACLUser(t *testing.T) {
	t.Parallel()
	const password = "lw-acl-pass-7f3a"
	cfg := Config{
		Name: testSource, Patterns: []string{"lock:*"},
		Token:    TokenRule{CounterKey: "{key}:fence"},
		Username: "leasewatch", Password: collectors.Password(password),
		DialTimeout: 2 * time.Second, PollInterval: 100 * time.Millisecond,
	}
	srv := startTLSRedis(t, password, cfg)
	cfg.Addrs = []string{srv.addr}
	clientTLS := testcert.ClientTLS(t, srv.ca, srv.cert)
	cfg.TLS = collectors.StaticTLS(clientTLS)

	t.Run("Recorded", func(t *testing.T) {
		// The ACL is in force: the user may read lock keys, nothing else.
		user := goredis.NewClient(&goredis.Options{Addr: srv.addr, Username: "leasewatch", Password: password, TLSConfig: clientTLS, Protocol: 2})
		defer user.Close()
		ctx := context.Background()
		if err := user.Get(ctx, "other").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("GET other as leasewatch: err = %v, want NOPERM", err)
		}
		if err := user.Set(ctx, "lock:x", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("SET lock:x as leasewatch: err = %v, want NOPERM", err)
		}
		// Scripts may run, so the collector reads with one call, but they
		// may only read too.
		if err := user.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"lock:x"}).Err(); err != nil && err != goredis.Nil {
			t.Fatalf("a reading script as leasewatch: %v", err)
		}
		if err := user.Eval(ctx, "return redis.call('SET', KEYS[1], 'v')", []string{"lock:x"}).Err(); err == nil || !strings.Contains(err.Error(), "can't run this command") {
			t.Fatalf("a writing script as leasewatch: err = %v, want it refused", err)
		}

		sk := newSink(t)
		c, _ := runCollector(t, cfg, sk)
		if d := c.Degraded(); d != "" {
			t.Fatalf("Degraded() = %q, want keyspace notifications with the minimal ACL", d)
		}
		// The lock's owner writes over the unix socket, as the default user.
		cli := srv.client(t)
		if err := cli.Eval(ctx, AcquireScript, []string{"lock:tls", "lock:tls:fence"}, "holder-a", 60000).Err(); err != nil {
			t.Fatal(err)
		}
		g := sk.WaitEvents(t, 5*time.Second, "lock:tls", 1, audit.EventGrant)[0]
		if g.Holder != "1:holder-a" || g.Token == nil || *g.Token != 1 || g.Inferred {
			t.Fatalf("grant = %+v, want 1:holder-a's with token 1, seen", g)
		}
		if err := cli.Del(ctx, "lock:tls").Err(); err != nil {
			t.Fatal(err)
		}
		if rel := sk.WaitEvents(t, 5*time.Second, "lock:tls", 1, audit.EventRelease)[0]; rel.Holder != "1:holder-a" {
			t.Fatalf("release = %+v, want 1:holder-a's", rel)
		}
	})

	// The password is rotated while the collector runs: the ACL user gets
	// a new password, the file gets it too, and the server drops the
	// user's connections. The collector reconnects with the file's new
	// password and goes on recording, with no restart.
	t.Run("RotatedPasswordFile", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(path, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fromFile := cfg
		fromFile.Password = collectors.PasswordFile(path)
		const rotated = "lw-acl-pass-rotated-41d8"
		srv.recordsAcrossRotation(t, fromFile, func(cli *goredis.Client) {
			setPassword := func(pw string) {
				t.Helper()
				if err := cli.Do(context.Background(), "ACL", "SETUSER", "leasewatch", "resetpass", ">"+pw).Err(); err != nil {
					t.Fatal(err)
				}
			}
			setPassword(rotated)
			t.Cleanup(func() { setPassword(password) })
			if err := os.WriteFile(path, []byte(rotated+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		})
		// Every connection the collector has now is the user's, with the
		// new password: the old one no longer authenticates.
		user := goredis.NewClient(&goredis.Options{Addr: srv.addr, Username: "leasewatch", Password: password, TLSConfig: clientTLS, Protocol: 2})
		defer user.Close()
		if err := user.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("PING with the old password: err = %v, want WRONGPASS", err)
		}
	})

	// The server's certificate moves to a new CA while the collector runs:
	// the server takes a certificate the new CA signed and drops the user's
	// connections, and the source's TLS now trusts the new CA. The
	// collector's new connections ask for the TLS configuration again and
	// go on recording, within the same Run.
	t.Run("RotatedCA", func(t *testing.T) {
		newCA := testcert.NewCA(t, t.TempDir(), "redis-next")
		var trusted atomic.Pointer[tls.Config]
		trusted.Store(clientTLS)
		rotating := cfg
		rotating.TLS = func() (*tls.Config, error) { return trusted.Load(), nil }
		srv.recordsAcrossRotation(t, rotating, func(cli *goredis.Client) {
			setCert := func(p testcert.Pair) {
				t.Helper()
				if err := cli.Do(context.Background(), "CONFIG", "SET", "tls-cert-file", p.CertFile, "tls-key-file", p.KeyFile).Err(); err != nil {
					t.Fatal(err)
				}
			}
			setCert(newCA.Server(t, "redis-server"))
			t.Cleanup(func() { setCert(srv.serverCert) })
			next := clientTLS.Clone()
			next.RootCAs = newCA.Pool()
			trusted.Store(next)
		})
		// The server no longer passes the old trust.
		old := goredis.NewClient(&goredis.Options{Addr: srv.addr, Username: "leasewatch", Password: password, TLSConfig: clientTLS, Protocol: 2})
		defer old.Close()
		if err := old.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Fatalf("PING trusting the old CA: err = %v, want an unknown authority", err)
		}
	})

	other := testcert.NewCA(t, t.TempDir(), "other")
	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   []string // one of
	}{
		{"WrongPassword", func(c *Config) { c.Password = collectors.Password("not-" + password) }, []string{"WRONGPASS"}},
		{"UnknownUser", func(c *Config) { c.Username = "nobody" }, []string{"WRONGPASS"}},
		// With TLS 1.3 the client finishes its handshake before the server
		// checks the client's certificate, so the server's alert races the
		// client's first write: the client reads the alert, or finds the
		// connection gone.
		{"NoClientCertificate", func(c *Config) { c.TLS = collectors.StaticTLS(testcert.ClientTLS(t, srv.ca, testcert.Pair{})) },
			[]string{"tls: certificate required", "broken pipe", "connection reset"}},
		{"ClientCertificateOfAnotherCA", func(c *Config) {
			c.TLS = collectors.StaticTLS(testcert.ClientTLS(t, srv.ca, other.Client(t, "leasewatch")))
		},
			[]string{"tls: unknown certificate authority", "broken pipe", "connection reset"}},
		{"ServerNotTrusted", func(c *Config) { c.TLS = collectors.StaticTLS(testcert.ClientTLS(t, other, srv.cert)) }, []string{"certificate signed by unknown authority"}},
		// The TLS port hangs up on a client speaking plain text.
		{"PlainTextToTLSPort", func(c *Config) { c.TLS = nil }, []string{"connection reset", "EOF"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bad := cfg
			tt.change(&bad)
			err := runUntilFailed(t, bad)
			t.Logf("Run: %v", err)
			if !slices.ContainsFunc(tt.want, func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Fatalf("Run: err = %v, want one containing one of %q", err, tt.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("Run: err = %v shows the password", err)
			}
		})
	}
}

// runUntilFailed runs a collector for cfg and returns the error Run stops
// with, failing the test if it is ready or still running after 10 seconds.
func runUntilFailed(t *testing.T, cfg Config) error {
	t.Helper()
	c, err := New(cfg, collectortest.Logger(t, testSource), WithGiveUpAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Run(ctx, newSink(t), func() { t.Error("collector ready with wrong credentials") })
	if err == nil {
		t.Fatal("Run returned nil, want an error (or it ran 10s)")
	}
	return err
}

func TestACLRules(t *testing.T) {
	got := ACLRules(Config{DB: 2, Patterns: []string{"lock:*", "mutex:{jobs}"}, Token: TokenRule{CounterKey: "fence:{key}"}})
	want := "resetkeys ~lock:* ~fence:lock:* ~mutex:{jobs} ~fence:mutex:{jobs} resetchannels &__keyspace@2__:lock:* &__keyspace@2__:mutex:{jobs} " +
		"-@all +ping +info +config|get +psubscribe +scan +evalsha +eval +multi +exec +type +get +hgetall +pttl +pexpiretime +select"
	if got != want {
		t.Fatalf("ACLRules =\n%s\nwant\n%s", got, want)
	}
}

func TestNewValidatesCredentials(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"TLSToUnixSocket", Config{Addrs: []string{"127.0.0.1:6379", "/run/redis.sock"}, TLS: collectors.StaticTLS(&tls.Config{})}, "addrs[1]: /run/redis.sock is a Unix socket"},
		{"UserWithoutPassword", Config{Addrs: []string{"127.0.0.1:6379"}, Username: "leasewatch"}, "password: required with a username"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Name, cfg.Patterns = testSource, []string{"lock:*"}
			_, err := New(cfg, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || audit.ErrorCode(err) != audit.EINVALID {
				t.Fatalf("New: err = %v, want an invalid-input error starting %q", err, tt.want)
			}
		})
	}
}
