package zookeeper

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/testcert"
	"github.com/leasewatch/leasewatch/collectors/zookeeper/zkserver"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// A source with tls reads a server's secureClientPort (Netty, PEM key and
// trust stores), cons included.
func TestTLSSecureClientPort(t *testing.T) {
	need(t)
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "zk")
	pair := ca.Server(t, "server")
	keyStore := filepath.Join(dir, "server.pem")
	cert, _ := os.ReadFile(pair.CertFile)
	key, _ := os.ReadFile(pair.KeyFile)
	if err := os.WriteFile(keyStore, append(key, cert...), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := zkserver.Start(
		"serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
		"secureClientPort="+strconv.Itoa(port),
		"ssl.keyStore.location="+keyStore, "ssl.keyStore.type=PEM",
		"ssl.trustStore.location="+ca.CertFile, "ssl.trustStore.type=PEM",
		"ssl.clientAuth=none",
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	secure := "127.0.0.1:" + strconv.Itoa(port)
	clientTLS := testcert.ClientTLS(t, ca, testcert.Pair{})
	// The holder connects over TLS too: a server's cons lists only the
	// connections of the port it is asked on.
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		return (&tls.Dialer{NetDialer: &net.Dialer{Timeout: d}, Config: clientTLS}).Dial(network, addr)
	}
	holder, _, err := zk.Connect([]string{secure}, 4*time.Second, zk.WithDialer(dial), zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder.Close)
	collectortest.Eventually(t, 10*time.Second, "a session over TLS", func() bool { return holder.State() == zk.StateHasSession })
	if _, err := holder.Create("/t-tls", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Create("/t-tls/guid-lock-", []byte("a"), zk.FlagEphemeral|zk.FlagSequence, acl); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "/t-tls")
	cfg.Servers = []string{secure}
	cfg.TLS = collectors.StaticTLS(clientTLS)
	sk := newSink(t)
	runCollector(t, cfg, sk)
	obs := sk.Events(t, "/t-tls", audit.EventObserved)
	if len(obs) != 1 || obs[0].TTL != 4*time.Second {
		t.Fatalf("observed = %+v, want the held lock with the owner's 4s lease read by cons over TLS", obs)
	}
}
