package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	lwredis "github.com/leasewatch/leasewatch/collectors/redis"
	"github.com/leasewatch/leasewatch/collectors/redis/redisserver"
	"github.com/leasewatch/leasewatch/collectors/testcert"
)

// TestServeRedisSourceWithTLSAndACLUser runs serve on a configuration whose
// Redis source connects over TLS with a client certificate, as an ACL user
// limited to redis.ACLRules whose password is in a file: the configuration
// reaches every connection the collector makes. A wrong password in the file
// is logged as the server's refusal, never as the password.
func TestServeRedisSourceWithTLSAndACLUser(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "redis")
	server, client := ca.Server(t, "redis-server"), ca.Client(t, "leasewatch")
	const password = "e2e-redis-pass-2b9d"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	source := lwredis.Config{Patterns: []string{"lock:*"}, Token: lwredis.TokenRule{CounterKey: "{key}:fence"}}
	args := []string{
		"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", server.CertFile, "--tls-key-file", server.KeyFile,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "yes", "--notify-keyspace-events", "Kg$hxe",
		"--user", "leasewatch", "on", ">" + password,
	}
	ctx := context.Background()
	srv, err := redisserver.Start(ctx, filepath.Join(dir, "redis"), append(args, strings.Fields(lwredis.ACLRules(source))...)...)
	if errors.Is(err, redisserver.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	bundle := filepath.Join(dir, "ca-bundle.crt") // what ca_file names
	testcert.Install(t, bundle, ca.CertFile)

	config := func(passwordFile string) string {
		pw := filepath.Join(dir, passwordFile)
		return fmt.Sprintf(`listen: 127.0.0.1:0
database: %s
sources:
  - name: cache
    kind: redis
    addr: 127.0.0.1:%d
    patterns: ["lock:*"]
    token: {counter_key: "{key}:fence"}
    username: leasewatch
    password_file: %s
    tls:
      ca_file: %s
      cert_file: %s
      key_file: %s
`, filepath.Join(dir, passwordFile+".db"), tlsPort, pw, bundle, client.CertFile, client.KeyFile)
	}
	for name, body := range map[string]string{"password": password + "\n", "wrong-password": "not-" + password + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("Recorded", func(t *testing.T) {
		base, _ := startServe(t, config("password"))
		// The holder takes the lock on the plain port, as the default user.
		cli := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
		defer cli.Close()
		if err := cli.Eval(ctx, lwredis.AcquireScript, []string{"lock:e2e", "lock:e2e:fence"}, "holder-a", 60000).Err(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "lock:e2e held by 1:holder-a with token 1", func() bool {
			var resp struct{ Locks []apiLock }
			getJSON(t, base, "/api/v1/locks?source=cache&name=lock:e2e", &resp)
			return len(resp.Locks) == 1 && resp.Locks[0].State == "held" && resp.Locks[0].Holder == "1:holder-a" &&
				resp.Locks[0].Token != nil && *resp.Locks[0].Token == 1
		})
		// Every connection on the TLS port, the pub/sub one included, is the
		// ACL user's: without a password go-redis would not authenticate, and
		// the collector would quietly be the default user.
		list, err := cli.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		var users []string // of the connections on the TLS port
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			fields := strings.Fields(line)
			if slices.Contains(fields, fmt.Sprintf("laddr=127.0.0.1:%d", tlsPort)) {
				users = append(users, fields[slices.IndexFunc(fields, func(f string) bool { return strings.HasPrefix(f, "user=") })])
			}
		}
		if len(users) < 2 || slices.ContainsFunc(users, func(u string) bool { return u != "user=leasewatch" }) {
			t.Fatalf("connections on the TLS port are %q, want the collector's (two or more) as user=leasewatch", users)
		}
	})

	// The server's certificate moves to a new CA, and ca_file is replaced
	// with the new CA while serve runs: once the server drops the
	// collector's connections, it reconnects trusting the new file.
	t.Run("RotatedCAFile", func(t *testing.T) {
		base, _ := startServe(t, config("password"))
		cli := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
		defer cli.Close()
		held := func(lock, holder string) {
			t.Helper()
			if err := cli.Eval(ctx, lwredis.AcquireScript, []string{lock, lock + ":fence"}, holder, 60000).Err(); err != nil {
				t.Fatal(err)
			}
			eventually(t, 15*time.Second, lock+" held by 1:"+holder, func() bool {
				var resp struct{ Locks []apiLock }
				getJSON(t, base, "/api/v1/locks?source=cache&name="+lock, &resp)
				return len(resp.Locks) == 1 && resp.Locks[0].State == "held" && resp.Locks[0].Holder == "1:"+holder
			})
		}
		held("lock:before-rotation", "holder-a")

		next := testcert.NewCA(t, dir, "redis-next")
		rotated := next.Server(t, "redis-server")
		testcert.Install(t, bundle, next.CertFile)
		if err := cli.Do(ctx, "CONFIG", "SET", "tls-cert-file", rotated.CertFile, "tls-key-file", rotated.KeyFile).Err(); err != nil {
			t.Fatal(err)
		}
		if err := cli.Do(ctx, "CLIENT", "KILL", "USER", "leasewatch").Err(); err != nil {
			t.Fatal(err)
		}
		held("lock:after-rotation", "holder-b")
	})

	t.Run("WrongPasswordLogged", func(t *testing.T) {
		path := filepath.Join(dir, "wrong.yaml")
		if err := os.WriteFile(path, []byte(config("wrong-password")), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var stderr syncBuffer
		done := make(chan int, 1)
		go func() { done <- run(ctx, []string{"serve", "--config", path}, &syncBuffer{}, &stderr) }()
		eventually(t, 15*time.Second, "the source's WRONGPASS in the log", func() bool { return strings.Contains(stderr.String(), "WRONGPASS") })
		cancel()
		<-done
		if strings.Contains(stderr.String(), password) {
			t.Fatalf("the log shows the password:\n%s", stderr.String())
		}
	})
}
