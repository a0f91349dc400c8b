package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// aliceHash is a bcrypt hash of "correct horse" at the lowest cost.
var aliceHash = func() string {
	h, err := bcrypt.GenerateFromPassword([]byte("correct horse"), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return string(h)
}()

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseConfigAuth(t *testing.T) {
	t.Run("DefaultsOpenOnLoopback", func(t *testing.T) {
		cfg, err := Parse([]byte("{}"))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		a := cfg.Auth
		if a.Mode != AuthNone || a.Realm != "leasewatch" || a.ProxyHeader != "X-Forwarded-User" || a.ProtectMetrics || a.ProtectHealth || a.AllowOpen {
			t.Errorf("auth = %+v, want mode none with the default realm and header, nothing protected", a)
		}
		if cfg.TLS.Enabled() {
			t.Errorf("tls = %+v, want disabled", cfg.TLS)
		}
	})
	for _, listen := range []string{"127.0.0.1:8080", "127.0.0.2:1", "localhost:8080", "[::1]:8080", "[::ffff:127.0.0.1]:80"} {
		t.Run("OpenOn"+listen, func(t *testing.T) {
			if _, err := Parse([]byte("listen: \"" + listen + "\"\n")); err != nil {
				t.Errorf("listen %s without auth: %v, want accepted (loopback)", listen, err)
			}
		})
	}
	t.Run("OpenOnNetworkWhenAllowed", func(t *testing.T) {
		cfg, err := Parse([]byte("listen: 0.0.0.0:8080\nauth:\n  allow_open: true\n"))
		if err != nil || !cfg.Auth.AllowOpen {
			t.Fatalf("Parse = %+v, %v; want allow_open accepted", cfg, err)
		}
	})
	t.Run("Basic", func(t *testing.T) {
		cfg, err := Parse([]byte(`
listen: 0.0.0.0:8080
auth:
  mode: basic
  realm: ops
  users:
    alice: "` + aliceHash + `"
  protect_metrics: true
`))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if a := cfg.Auth; a.Mode != AuthBasic || a.Realm != "ops" || a.Users["alice"] != aliceHash || !a.ProtectMetrics || a.ProtectHealth {
			t.Fatalf("auth = %+v", a)
		}
	})
	t.Run("Proxy", func(t *testing.T) {
		cfg, err := Parse([]byte(`
listen: "[::]:8080"
auth:
  mode: proxy
  proxy_header: X-Auth-Request-User
  trusted_proxies: ["10.0.0.0/8", "192.168.1.7", "fd00::/8", "::ffff:172.16.0.0/108"]
  protect_health: true
`))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		a := cfg.Auth
		if a.Mode != AuthProxy || a.ProxyHeader != "X-Auth-Request-User" || !a.ProtectHealth {
			t.Fatalf("auth = %+v", a)
		}
		want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
			netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("172.16.0.0/12")}
		if got := a.Proxies(); !slices.Equal(got, want) {
			t.Errorf("Proxies() = %v, want %v", got, want)
		}
	})
}

func TestParseConfigAuthErrorsNameTheField(t *testing.T) {
	basic := "auth:\n  mode: basic\n  users:\n    alice: \"" + aliceHash + "\"\n"
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"OpenOnAllInterfaces", "listen: 0.0.0.0:8080\n", "auth.mode: none, but listen 0.0.0.0:8080 is not a loopback address"},
		{"OpenOnEmptyHost", "listen: \":8080\"\n", "auth.mode"},
		{"OpenOnIPv6Any", "listen: \"[::]:8080\"\n", "auth.mode"},
		{"OpenOnPublicAddress", "listen: 192.0.2.10:8080\n", "auth.mode"},
		{"OpenOnHostName", "listen: leasewatch.example:8080\n", "auth.mode"},
		{"ExplicitNoneOnNetwork", "listen: 0.0.0.0:8080\nauth:\n  mode: none\n", "auth.mode"},
		{"UnknownMode", "auth:\n  mode: oauth\n", "auth.mode: \"oauth\""},
		{"UnknownKey", "auth:\n  user: alice\n", "auth.user"},
		{"BasicWithoutUsers", "auth:\n  mode: basic\n", "auth.users"},
		{"PlainPassword", "auth:\n  mode: basic\n  users:\n    alice: hunter2\n", "auth.users.alice: not a bcrypt hash"},
		{"EmptyHash", "auth:\n  mode: basic\n  users:\n    alice: \"\"\n", "auth.users.alice"},
		{"ColonInUser", "auth:\n  mode: basic\n  users:\n    \"a:b\": \"" + aliceHash + "\"\n", "auth.users.\"a:b\""},
		{"UsersNotAMap", "auth:\n  mode: basic\n  users: [alice]\n", "auth.users"},
		{"QuoteInRealm", basic + "  realm: 'a\"b'\n", "auth.realm"},
		{"ProxyWithoutTrusted", "auth:\n  mode: proxy\n", "auth.trusted_proxies"},
		{"BadTrustedProxy", "auth:\n  mode: proxy\n  trusted_proxies: [\"10.0.0.0/8\", \"proxy.internal\"]\n", "auth.trusted_proxies[1]"},
		{"BadCIDR", "auth:\n  mode: proxy\n  trusted_proxies: [\"10.0.0.0/40\"]\n", "auth.trusted_proxies[0]"},
		{"BadProxyHeader", "auth:\n  mode: proxy\n  trusted_proxies: [\"127.0.0.1\"]\n  proxy_header: \"X User\"\n", "auth.proxy_header"},
		{"UsersWithProxy", "auth:\n  mode: proxy\n  trusted_proxies: [\"127.0.0.1\"]\n  users:\n    alice: \"" + aliceHash + "\"\n", "auth.users: apply only to mode basic"},
		{"TrustedProxiesWithBasic", basic + "  trusted_proxies: [\"127.0.0.1\"]\n", "auth.trusted_proxies: apply only to mode proxy"},
		{"AllowOpenWithBasic", basic + "  allow_open: true\n", "auth.allow_open"},
		{"ProtectNotABool", "auth:\n  protect_metrics: sometimes\n", "auth.protect_metrics"},
		{"ProtectWithoutMode", "auth:\n  protect_health: true\n", "auth.protect_metrics, protect_health: mode none"},
		{"EmptyTokenEnvName", "ingest_tokens_env: [\"\"]\n", "ingest_tokens_env[0]"},
		{"BadTokenEnvName", "ingest_tokens_env: [OK_NAME, \"1BAD\"]\n", "ingest_tokens_env[1]"},
		{"KeyWithoutCert", "tls:\n  key_file: /k\n", "tls.cert_file"},
		{"CertWithoutKey", "tls:\n  cert_file: /c\n", "tls.key_file"},
		{"UnknownTLSKey", "tls:\n  cert: /c\n", "tls.cert"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parseFailsInEachStyle(t, tt.yaml, tt.want, func(t *testing.T, err error) {
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), aliceHash) {
					t.Errorf("error %q quotes a secret", err)
				}
			})
		})
	}
}

// No token, password or hash reaches an error message, where it would be
// logged: not even the first characters yaml quotes of a value it cannot
// decode.
func TestParseConfigErrorsHideSecrets(t *testing.T) {
	const secret = "s3cr3t-tok"
	for _, tt := range []struct{ name, yaml, want string }{
		{"TokensNotAList", "ingest_tokens: " + secret + "\n", "ingest_tokens"},
		{"TokenNotAString", "ingest_tokens: [{" + secret + ": x}]\n", "ingest_tokens"},
		{"PasswordNotAString", "sources:\n  - name: r\n    kind: redis\n    password: {" + secret + ": 1}\n", "sources[0].password"},
		{"UserHashNotAString", "auth:\n  mode: basic\n  users:\n    alice: [" + secret + "]\n", "auth.users"},
		{"UserHashNotBcrypt", "auth:\n  mode: basic\n  users:\n    alice: " + secret + "\n", "auth.users.alice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parseFailsInEachStyle(t, tt.yaml, tt.want, func(t *testing.T, err error) {
				if strings.Contains(err.Error(), secret[:4]) {
					t.Errorf("error %q shows the secret", err)
				}
			})
		})
	}
	// Other fields keep the value: it helps, and it is no secret.
	_, err := Parse([]byte("metrics:\n  max_lock_series: lots\n"))
	if err == nil || !strings.Contains(err.Error(), "lots") {
		t.Errorf("error = %v, want it to quote the bad value lots", err)
	}
}

func TestLoadConfigIngestTokensEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LW_TEST_TOKEN_NEW", "  new-token\n")
	t.Setenv("LW_TEST_TOKEN_OLD", "old-token")
	t.Setenv("LW_TEST_TOKEN_EMPTY", " ")
	t.Setenv("LW_TEST_TOKEN_CONTROL", "bad\x01token")
	cfg, err := Load(writeFile(t, dir, "lw.yaml", "ingest_tokens: [a]\ningest_tokens_env: [LW_TEST_TOKEN_NEW, LW_TEST_TOKEN_OLD]\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if want := []string{"a", "new-token", "old-token"}; !slices.Equal(cfg.IngestTokens, want) {
		t.Fatalf("tokens = %q, want %q", cfg.IngestTokens, want)
	}
	for name, tt := range map[string]struct{ env, want string }{
		"Unset":   {"LW_TEST_TOKEN_UNSET", "ingest_tokens_env[1]: environment variable LW_TEST_TOKEN_UNSET is not set"},
		"Empty":   {"LW_TEST_TOKEN_EMPTY", "ingest_tokens_env[1]: environment variable LW_TEST_TOKEN_EMPTY is empty"},
		"Control": {"LW_TEST_TOKEN_CONTROL", "ingest_tokens_env[1]: environment variable LW_TEST_TOKEN_CONTROL holds a control character"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeFile(t, dir, "lw.yaml", "ingest_tokens_env: [LW_TEST_TOKEN_OLD, "+tt.env+"]\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "old-token") || strings.Contains(err.Error(), "bad") {
				t.Errorf("error %q shows a token", err)
			}
		})
	}
}

func TestLoadConfigAuthUsersFile(t *testing.T) {
	dir := t.TempDir()
	bob, err := bcrypt.GenerateFromPassword([]byte("battery staple"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	users := writeFile(t, dir, "htpasswd", "# htpasswd -nbBC 12\nbob:"+string(bob)+"\n\n")
	cfg, err := Load(writeFile(t, dir, "lw.yaml", "auth:\n  mode: basic\n  users:\n    alice: \""+aliceHash+"\"\n  users_file: "+users+"\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if u := cfg.Auth.Users; len(u) != 2 || u["alice"] != aliceHash || u["bob"] != string(bob) {
		t.Fatalf("users = %q, want alice and bob", u)
	}
	// users_file alone is enough for mode basic.
	if _, err := Load(writeFile(t, dir, "lw.yaml", "auth:\n  mode: basic\n  users_file: "+users+"\n")); err != nil {
		t.Fatalf("Load with users_file only: %v", err)
	}
	for name, tt := range map[string]struct{ file, want string }{
		"Missing":       {filepath.Join(dir, "nope"), "auth.users_file"},
		"Empty":         {writeFile(t, dir, "empty", "# nobody yet\n"), "holds no user"},
		"NoColon":       {writeFile(t, dir, "nocolon", "carol\n"), "line 1: want name:bcrypt-hash"},
		"PlainText":     {writeFile(t, dir, "plain", "carol:hunter2\n"), "line 1: carol: not a bcrypt hash"},
		"DuplicateUser": {writeFile(t, dir, "dup", "alice:"+string(bob)+"\n"), "user alice is already defined"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeFile(t, dir, "lw.yaml", "auth:\n  mode: basic\n  users:\n    alice: \""+aliceHash+"\"\n  users_file: "+tt.file+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "auth.users_file") {
				t.Fatalf("err = %v, want one naming auth.users_file: %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), string(bob)) {
				t.Errorf("error %q shows a secret", err)
			}
		})
	}
}

func TestLoadConfigTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	cfg, err := Load(writeFile(t, dir, "lw.yaml", "tls:\n  cert_file: "+cert+"\n  key_file: "+key+"\n"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !cfg.TLS.Enabled() || cfg.TLS.CertFile != cert || cfg.TLS.KeyFile != key {
		t.Fatalf("tls = %+v", cfg.TLS)
	}
	for name, tt := range map[string]struct{ cert, key string }{
		"MissingCert":  {filepath.Join(dir, "nope.crt"), key},
		"KeyIsTheCert": {cert, cert},
		"CertIsTheKey": {key, key},
		"GarbageKey":   {cert, writeFile(t, dir, "garbage.key", "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n")},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeFile(t, dir, "lw.yaml", "tls:\n  cert_file: "+tt.cert+"\n  key_file: "+tt.key+"\n"))
			if err == nil || !strings.Contains(err.Error(), "tls.cert_file, key_file") {
				t.Fatalf("err = %v, want one naming tls.cert_file, key_file", err)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "c2VjcmV0") {
				t.Errorf("error %q shows key material", err)
			}
		})
	}
}

// writeSelfSigned writes a self-signed certificate and its key as PEM files.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasewatch"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, dir, "tls.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyFile = writeFile(t, dir, "tls.key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})))
	return certFile, keyFile
}
