// Package kubetest runs a real kube-apiserver, built from the Kubernetes Go
// module, on top of an embedded etcd: the backend of the Kubernetes
// collector's tests, the deployment-manifest checks and the load tool.
//
// The apiserver is built from the wrapper module in
// collectors/kubernetes/testdata/kube-apiserver (its own go.mod, so the main
// module never depends on k8s.io/kubernetes) and cached in .cache/ under a
// name derived from the wrapper's files; it is rebuilt only when they change.
// A cold build takes several minutes on 2 cores.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// Apiserver is a running kube-apiserver and its etcd.
type Apiserver struct {
	// URL is the apiserver's https address.
	URL string
	// Config authenticates as a cluster admin (system:masters).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for Config, context "test".
	Kubeconfig string
	// Etcd is the backing etcd, for tests that compact its history.
	Etcd *embedded.Server

	cmd  *exec.Cmd
	done chan error
	opts Options // for a peer
}

// Options are what StartWith varies; the zero Options is Start's.
type Options struct {
	// RBAC authorizes requests with RBAC rather than allowing every one, so
	// that a test can check what a Role grants by impersonating its subject.
	// Config, in system:masters, is allowed everything either way.
	RBAC bool
}

func (o Options) authorizationMode() string {
	if o.RBAC {
		return "RBAC"
	}
	return "AlwaysAllow"
}

const adminToken = "leasewatch-test-admin-token"

// wrapperDir returns the wrapper module's directory and the repository root.
func wrapperDir() (wrapper, root string) {
	_, file, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(file), "..", "..", "..")
	return filepath.Join(root, "collectors", "kubernetes", "testdata", "kube-apiserver"), root
}

// Binary returns the path of the cached kube-apiserver binary, building it
// first when the cache has none for the wrapper's current files. Progress of
// a build is written to log.
func Binary(ctx context.Context, log io.Writer) (string, error) {
	wrapper, root := wrapperDir()
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		b, err := os.ReadFile(filepath.Join(wrapper, name))
		if err != nil {
			return "", fmt.Errorf("kube-apiserver wrapper: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "%s/%s\n", runtime.GOOS, runtime.GOARCH)
	bin := filepath.Join(root, ".cache", "kube-apiserver-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// Build to a private name and rename, so test packages building at the
	// same time never run a half-written binary.
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	fmt.Fprintf(log, "building kube-apiserver from k8s.io/kubernetes into %s (several minutes on a cold cache)\n", bin)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
	cmd.Dir = wrapper
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("build kube-apiserver: %w", err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "built kube-apiserver in %s\n", time.Since(start).Round(time.Second))
	return bin, nil
}

// Start runs etcd and a kube-apiserver with their state in dir, and waits
// until the apiserver is ready. The apiserver's output goes to log.
func Start(ctx context.Context, dir string, log io.Writer) (*Apiserver, error) {
	return StartWith(ctx, dir, log, Options{})
}

// StartWith is Start with opts.
func StartWith(ctx context.Context, dir string, log io.Writer, opts Options) (*Apiserver, error) {
	bin, err := Binary(ctx, log)
	if err != nil {
		return nil, err
	}
	etcd, err := embedded.Start(ctx, filepath.Join(dir, "etcd"), embedded.Options{})
	if err != nil {
		return nil, err
	}
	a, err := startApiserver(ctx, bin, dir, etcd, log, opts)
	if err != nil {
		etcd.Close()
		return nil, err
	}
	return a, nil
}

func startApiserver(ctx context.Context, bin, dir string, etcd *embedded.Server, log io.Writer, opts Options) (*Apiserver, error) {
	files, err := writeFiles(dir)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := testproc.FreePort()
		if err != nil {
			return nil, err
		}
		a := &Apiserver{URL: "https://127.0.0.1:" + strconv.Itoa(port), Etcd: etcd, done: make(chan error, 1), opts: opts}
		a.cmd = exec.Command(bin,
			"--etcd-servers="+etcd.Endpoint,
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file="+files.saPub,
			"--service-account-signing-key-file="+files.saKey,
			"--authorization-mode="+opts.authorizationMode(),
			"--secure-port="+strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--cert-dir="+filepath.Join(dir, "certs"),
			"--token-auth-file="+files.tokens,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--disable-admission-plugins=ServiceAccount",
		)
		a.cmd.Stdout, a.cmd.Stderr = log, log
		if err := a.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start kube-apiserver: %w", err)
		}
		go func() { a.done <- a.cmd.Wait() }()
		a.Config = &rest.Config{Host: a.URL, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 1000, Burst: 2000}
		if lastErr = a.waitReady(ctx); lastErr == nil {
			a.Kubeconfig = filepath.Join(dir, "kubeconfig")
			if err := a.writeKubeconfig(a.Kubeconfig); err != nil {
				a.Stop()
				return nil, err
			}
			return a, nil
		}
		a.stopProcess()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("kube-apiserver never became ready: %w", lastErr)
}

func (a *Apiserver) waitReady(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(a.Config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		select {
		case err := <-a.done:
			a.done <- err
			return fmt.Errorf("kube-apiserver exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 90s: %v", err)
		}
	}
}

// Stop stops the apiserver and its etcd.
func (a *Apiserver) Stop() {
	a.stopProcess()
	a.Etcd.Close()
}

func (a *Apiserver) stopProcess() {
	if a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

func (a *Apiserver) writeKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: a.URL, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: adminToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}

type files struct{ saKey, saPub, tokens string }

func writeFiles(dir string) (files, error) {
	f := files{saKey: filepath.Join(dir, "sa.key"), saPub: filepath.Join(dir, "sa.pub"), tokens: filepath.Join(dir, "tokens.csv")}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return f, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return f, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return f, err
	}
	err = errors.Join(
		os.WriteFile(f.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600),
		os.WriteFile(f.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644),
		os.WriteFile(f.tokens, []byte(adminToken+`,admin,admin,"system:masters"`+"\n"), 0o600),
	)
	return f, err
}
