package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// How the test forces a 410. Compacting etcd is not enough against the
// shared apiserver: it serves watches from its watch cache, which never
// learns of a compaction made behind its back and keeps at least 75s of
// events (growing up to 100k of them), so a resume from a resourceVersion a
// few seconds old still succeeds there. The test therefore restarts the
// collector against a second kube-apiserver on the same etcd, as in a
// highly available control plane, started with --watch-cache=false: its
// watches go straight to etcd, and etcd refuses a start revision below the
// compaction with ErrCompacted, which the apiserver sends as an ERROR event
// with a 410 (Expired) status. The 410 thus comes from exactly the cause the
// collector must survive: history it had not read is gone.

// startPeer runs a second kube-apiserver on the shared apiserver's etcd with
// its watch cache off and returns an admin client configuration for it. It
// stops when the test ends.
func startPeer(t *testing.T) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := kubetest.Binary(ctx, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token := "peer-admin-token"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey, saPub, tokens := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub"), filepath.Join(dir, "tokens.csv")
	if err := errors.Join(
		os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600),
		os.WriteFile(saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644),
		os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600),
	); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := testproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin,
			"--etcd-servers="+apiserver.Etcd.Endpoint,
			"--watch-cache=false",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file="+saPub,
			"--service-account-signing-key-file="+saKey,
			"--authorization-mode=AlwaysAllow",
			"--secure-port="+strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--cert-dir="+filepath.Join(dir, "certs"),
			"--token-auth-file="+tokens,
			"--service-cluster-ip-range=10.0.0.0/24",
			"--disable-admission-plugins=ServiceAccount",
		)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			t.Fatalf("start peer kube-apiserver: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		cfg := &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(port), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 1000, Burst: 2000}
		if lastErr = waitReady(ctx, cfg, exited); lastErr == nil {
			t.Cleanup(stop)
			return cfg
		}
		stop()
	}
	t.Fatalf("peer kube-apiserver never became ready: %v\n%s", lastErr, testproc.TailFile(filepath.Join(dir, "kube-apiserver.log"), 30))
	return nil
}

func waitReady(ctx context.Context, cfg *rest.Config, exited chan error) error {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := client.Get(cfg.Host + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) == "ok" {
				return nil
			}
			err = fmt.Errorf("readyz: %s", strings.TrimSpace(string(body)))
		}
		select {
		case e := <-exited:
			exited <- e
			return fmt.Errorf("exited: %v", e)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 90s: %v", err)
		}
	}
}

// compactEtcd compacts the shared etcd's history up to its current revision
// and returns that revision.
func compactEtcd(t *testing.T) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{apiserver.Etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact etcd at %d: %v", rev, err)
	}
	return rev
}

func TestWatchGoneRelists(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	s := newSink(t)
	cfg := Config{Namespaces: []string{ns}}
	cr := runCollector(t, s, cfg)

	// Leases long enough that the tracker's clock does not end a tenure
	// while the collector is away (the peer takes seconds to start).
	long := 60 * time.Second
	var log electionLog
	kept := startElector(t, ns, "kept", "k1", electorConfig{LeaseDuration: long, Log: &log})
	moved := startElector(t, ns, "moved", "m1", electorConfig{Release: true, LeaseDuration: long, Log: &log})
	kept.waitLeading(t, 10*time.Second)
	moved.waitLeading(t, 10*time.Second)
	s.WaitEvents(t, 10*time.Second, ns+"/kept", 1, audit.EventGrant)
	s.WaitEvents(t, 10*time.Second, ns+"/moved", 1, audit.EventGrant)
	cr.Stop(t)

	// While the collector is away: "moved" changes hands, "fresh" is taken,
	// "kept" goes on renewing; then etcd's history is compacted.
	moved.stop()
	m2 := startElector(t, ns, "moved", "m2", electorConfig{Release: true, LeaseDuration: long, Log: &log})
	fresh := startElector(t, ns, "fresh", "f1", electorConfig{Release: true, LeaseDuration: long, Log: &log})
	m2.waitLeading(t, 10*time.Second)
	fresh.waitLeading(t, 10*time.Second)
	renewedBefore := getLease(t, ns, "kept").Spec.RenewTime.Time
	collectortest.Eventually(t, 10*time.Second, "kept to renew", func() bool { return getLease(t, ns, "kept").Spec.RenewTime.After(renewedBefore) })
	compacted := compactEtcd(t)

	peer := startPeer(t)
	// An input in flight when the collector stopped may have been stored
	// after Run returned; the cursor now stored is the one to resume from.
	stoppedCursor, stoppedAt := s.Cursor(testSource)
	before := len(s.Inputs())
	runCollector(t, s, cfg, WithRESTConfig(peer))
	// A resume is ready once its watch is open; the 410 arrives on it.
	collectortest.Eventually(t, 10*time.Second, "an input after the restart", func() bool { return len(s.Inputs()) > before })
	in := s.Inputs()[before]
	if in.Blind == nil || !in.Snapshot || !strings.Contains(in.Blind.Reason, "410") {
		t.Fatalf("first input after the restart = %+v, want a blind snapshot citing the 410", in)
	}
	t.Logf("blind reason: %s", in.Blind.Reason)
	if !in.Blind.From.Equal(stoppedAt) || in.Blind.To.Before(in.Blind.From) {
		t.Fatalf("blind window %s..%s, want from the stored cursor's time %s", in.Blind.From, in.Blind.To, stoppedAt)
	}
	rv, _ := strconv.ParseInt(strings.TrimPrefix(in.Cursor, ns+"="), 10, 64)
	if in.Cursor == stoppedCursor || rv < compacted {
		t.Fatalf("cursor after the relist = %q, want the new list's resourceVersion (>= the compaction at %d)", in.Cursor, compacted)
	}
	got := map[string]audit.Observation{}
	for _, ob := range in.Observations {
		if ob.Kind != audit.EventGrant || !ob.Inferred {
			t.Fatalf("observation %+v, want inferred grants", ob)
		}
		got[strings.TrimPrefix(ob.Lock.Name, ns+"/")] = ob
	}
	want := map[string]struct {
		holder string
		token  int64
	}{"kept": {"k1", 0}, "moved": {"m2", 1}, "fresh": {"f1", 0}}
	if len(got) != len(want) {
		t.Fatalf("relist holds %v, want %v", got, want)
	}
	for name, w := range want {
		if ob := got[name]; ob.Holder != w.holder || tokenOf(ob.Token) != w.token {
			t.Errorf("relist: %s held by %s token %d, want %s token %d", name, ob.Holder, tokenOf(ob.Token), w.holder, w.token)
		}
	}

	// The sink notes an input before it stores it: the relist is in the
	// store once its blind windows are.
	for _, name := range []string{"kept", "moved"} {
		s.WaitEvents(t, 10*time.Second, ns+"/"+name, 1, audit.EventBlind)
	}

	// The tracker: kept goes on with its tenure, moved's first tenure ended
	// out of sight, fresh is new, and the window is on record.
	if ts := s.Tenures(t, ns+"/kept"); len(ts) != 1 || !ts[0].Held() {
		t.Errorf("kept tenures = %+v, want the one tenure, still held", ts)
	}
	ts := s.Tenures(t, ns+"/moved")
	if len(ts) != 2 || ts[0].Held() || ts[0].Holder != "m1" || !ts[1].Held() || ts[1].Holder != "m2" {
		t.Errorf("moved tenures = %+v, want m1's ended and m2's held", ts)
	}
	for _, name := range []string{"kept", "moved"} {
		if f := s.Findings(t, ns+"/"+name, audit.FindingBlindWindow); len(f) != 1 || !f[0].At.Equal(stoppedAt) {
			t.Errorf("blind_window findings of %s = %+v, want one from %s", name, f, stoppedAt)
		}
		if evs := s.Events(t, ns+"/"+name, audit.EventBlind); len(evs) != 1 {
			t.Errorf("blind events of %s = %d, want 1", name, len(evs))
		}
		s.NoFindings(t, ns+"/"+name, fencingFindings...)
	}

	// And it watches on from the list's resourceVersion.
	m2.stop()
	rel := s.WaitEvents(t, 10*time.Second, ns+"/moved", 2, audit.EventRelease)[1]
	if rel.Holder != "m2" || tokenOf(rel.Token) != 1 || rel.Inferred {
		t.Fatalf("release after the relist = %+v, want m2's token 1, seen", rel)
	}
}
