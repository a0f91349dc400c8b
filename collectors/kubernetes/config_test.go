package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestNewValidates(t *testing.T) {
	restCfg := &rest.Config{Host: "https://127.0.0.1:6443"}
	tests := []struct {
		name string
		cfg  Config
		opts []Option
		want string
	}{
		{"NoName", Config{}, []Option{WithRESTConfig(restCfg)}, "name: required"},
		{"EmptyNamespace", Config{Name: "k", Namespaces: []string{"default", ""}}, []Option{WithRESTConfig(restCfg)}, "namespaces[1]: empty"},
		{"BadNamespace", Config{Name: "k", Namespaces: []string{"Team_A"}}, []Option{WithRESTConfig(restCfg)}, `namespaces[0]: "Team_A" is not a namespace name`},
		{"BadHeartbeatNamespace", Config{Name: "k", HeartbeatNamespaces: []string{"-x"}}, []Option{WithRESTConfig(restCfg)}, `heartbeat_namespaces[0]: "-x" is not a namespace name`},
		{"KubeconfigWithRESTConfig", Config{Name: "k", Kubeconfig: "/etc/kube"}, []Option{WithRESTConfig(restCfg)}, "kubeconfig: must be empty"},
		{"MissingKubeconfig", Config{Name: "k", Kubeconfig: filepath.Join(t.TempDir(), "nope")}, nil, "kubeconfig: stat "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, nil, tt.opts...)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("New: err = %v, want one starting %q", err, tt.want)
			}
			if audit.ErrorCode(err) != audit.EINVALID {
				t.Fatalf("error code = %q, want %q", audit.ErrorCode(err), audit.EINVALID)
			}
		})
	}

	c, err := New(Config{Name: "cluster-a", Namespaces: []string{"b", "a", "b"}}, nil, WithRESTConfig(restCfg))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "cluster-a" || c.Kind() != audit.KindKubernetes {
		t.Fatalf("Name, Kind = %q, %q", c.Name(), c.Kind())
	}
	if strings.Join(c.scopes, ",") != "b,a" {
		t.Errorf("scopes = %q, want the configured namespaces once each", c.scopes)
	}
	if !c.heartbeatNS["kube-node-lease"] || len(c.heartbeatNS) != 1 {
		t.Errorf("heartbeat namespaces = %v, want kube-node-lease by default", c.heartbeatNS)
	}
	c, err = New(Config{Name: "cluster-a", HeartbeatNamespaces: []string{}}, nil, WithRESTConfig(restCfg))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.heartbeatNS) != 0 || len(c.scopes) != 1 || c.scopes[0] != "" {
		t.Errorf("heartbeat namespaces = %v, scopes = %q; want none and all namespaces", c.heartbeatNS, c.scopes)
	}
}

// writeKubeconfig writes a kubeconfig with two contexts, "one" (current) and
// "two", each pointing at its own server.
func writeKubeconfig(t *testing.T, path string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for _, name := range []string{"one", "two"} {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: "https://" + name + ".example:6443"}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "token-" + name}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	cfg.CurrentContext = "one"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// TestKubeconfigLoading follows kubectl's order: an explicit path (with ~),
// else KUBECONFIG, else ~/.kube/config, else in-cluster; and a context
// override. It changes the environment, so it does not run in parallel.
func TestKubeconfigLoading(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	// client-go resolves ~/.kube/config once, when the process starts.
	saved := clientcmd.RecommendedHomeFile
	clientcmd.RecommendedHomeFile = filepath.Join(home, ".kube", "config")
	t.Cleanup(func() { clientcmd.RecommendedHomeFile = saved })

	host := func(t *testing.T, cfg Config) string {
		t.Helper()
		c, err := New(cfg, nil)
		if err != nil {
			t.Fatalf("New(%+v): %v", cfg, err)
		}
		return c.rest.Host
	}

	t.Run("NothingFound", func(t *testing.T) {
		_, err := New(Config{Name: "k"}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), "kubeconfig: none found") || audit.ErrorCode(err) != audit.EINVALID {
			t.Fatalf("New without any kubeconfig: err = %v, want kubeconfig: none found (invalid)", err)
		}
	})

	writeKubeconfig(t, filepath.Join(home, ".kube", "config"))
	t.Run("HomeDefault", func(t *testing.T) {
		if got := host(t, Config{Name: "k"}); got != "https://one.example:6443" {
			t.Errorf("host = %q, want the current context's server from ~/.kube/config", got)
		}
	})
	t.Run("ContextOverride", func(t *testing.T) {
		if got := host(t, Config{Name: "k", Context: "two"}); got != "https://two.example:6443" {
			t.Errorf("host = %q, want context two's server", got)
		}
	})
	t.Run("UnknownContext", func(t *testing.T) {
		_, err := New(Config{Name: "k", Context: "three"}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), `context: "three" is not in the kubeconfig`) || audit.ErrorCode(err) != audit.EINVALID {
			t.Fatalf("err = %v, want context: \"three\" is not in the kubeconfig (invalid)", err)
		}
	})

	alt := filepath.Join(home, "clusters", "alt.yaml")
	writeKubeconfig(t, alt)
	cfg, err := clientcmd.LoadFromFile(alt)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CurrentContext = "two"
	if err := clientcmd.WriteToFile(*cfg, alt); err != nil {
		t.Fatal(err)
	}
	t.Run("TildePath", func(t *testing.T) {
		if got := host(t, Config{Name: "k", Kubeconfig: "~/clusters/alt.yaml"}); got != "https://two.example:6443" {
			t.Errorf("host = %q, want the server of ~/clusters/alt.yaml's current context", got)
		}
	})
	t.Run("EnvVariable", func(t *testing.T) {
		t.Setenv("KUBECONFIG", alt)
		if got := host(t, Config{Name: "k"}); got != "https://two.example:6443" {
			t.Errorf("host = %q, want KUBECONFIG's server, not ~/.kube/config's", got)
		}
	})
}

// TestKubeconfigCredentials connects to the real apiserver through a
// kubeconfig file, as leasewatch serve does: a context other than the
// current one whose user reads its bearer token from a file records a grant;
// the current context, whose token the apiserver does not know, stops Run
// at once with an error that says so and does not show the token.
func TestKubeconfigCredentials(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	dir := t.TempDir()
	admin, err := clientcmd.LoadFromFile(apiserver.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	token := admin.AuthInfos[admin.Contexts[admin.CurrentContext].AuthInfo].Token
	if token == "" {
		t.Fatal("the test apiserver's kubeconfig has no bearer token")
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	const wrongToken = "not-the-admin-token-5d1e"
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: apiserver.URL, InsecureSkipTLSVerify: true}
	kc.AuthInfos["from-file"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	kc.AuthInfos["wrong"] = &clientcmdapi.AuthInfo{Token: wrongToken}
	kc.Contexts["from-file"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "from-file"}
	kc.Contexts["wrong"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "wrong"}
	kc.CurrentContext = "wrong"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)

	t.Run("ContextWithTokenFile", func(t *testing.T) {
		c, err := New(Config{Name: testSource, Kubeconfig: path, Context: "from-file", Namespaces: []string{ns}}, collectortest.Logger(t, testSource))
		if err != nil {
			t.Fatal(err)
		}
		s := newSink(t)
		collectortest.Run(t, c, s)
		createLease(t, ns, "credentials", coordinationv1.LeaseSpec{HolderIdentity: ptr("holder-a"), LeaseDurationSeconds: ptr(int32(30)), RenewTime: now()})
		g := s.WaitEvents(t, 10*time.Second, ns+"/credentials", 1, audit.EventGrant)[0]
		if g.Holder != "holder-a" {
			t.Fatalf("grant = %+v, want holder-a's", g)
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		c, err := New(Config{Name: testSource, Kubeconfig: path, Namespaces: []string{ns}}, collectortest.Logger(t, testSource))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err = c.Run(ctx, newSink(t), func() { t.Error("collector ready with a token the apiserver does not know") })
		if err == nil {
			t.Fatal("Run returned nil, want an error (or it ran 15s)")
		}
		t.Logf("Run: %v", err)
		if !strings.Contains(err.Error(), "Unauthorized") {
			t.Fatalf("Run: err = %v, want Unauthorized", err)
		}
		if strings.Contains(err.Error(), wrongToken) {
			t.Fatalf("Run: err = %v shows the token", err)
		}
	})
}

// TestNewClientRateLimit: with no limit in its configuration the collector
// asks the apiserver at up to clientQPS requests a second, not client-go's
// default 5, at which a 130,000-node cluster's list outlasted its Leases;
// a limit the configuration sets is kept.
func TestNewClientRateLimit(t *testing.T) {
	for _, tt := range []struct {
		name string
		rest rest.Config
		want float32
	}{
		{"Unset", rest.Config{Host: "https://127.0.0.1:6443"}, clientQPS},
		{"Set", rest.Config{Host: "https://127.0.0.1:6443", QPS: 7, Burst: 9}, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{Name: "k"}, nil, WithRESTConfig(&tt.rest))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.client.CoordinationV1().RESTClient().GetRateLimiter().QPS(); got != tt.want {
				t.Fatalf("client QPS = %v, want %v", got, tt.want)
			}
		})
	}
}
