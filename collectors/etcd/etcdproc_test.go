package etcd

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// The fault tests need etcd in a process of its own, to stop, restart and
// freeze with SIGSTOP: the test binary runs itself as that process when
// etcdProcEnv is set.
const etcdProcEnv = "LEASEWATCH_TEST_ETCD_PROCESS"

func TestMain(m *testing.M) {
	if spec := os.Getenv(etcdProcEnv); spec != "" {
		os.Exit(serveEtcdProcess(spec))
	}
	os.Exit(m.Run())
}

// serveEtcdProcess runs etcd as described by spec (data dir, client URL and
// peer URL, and for an https client URL the server's certificate and key
// files, separated by spaces) until SIGTERM. Unlike embedded.Start it keeps
// its ports, so a restarted etcd is where its clients look for it.
func serveEtcdProcess(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 && len(f) != 5 {
		fmt.Fprintf(os.Stderr, "%s=%q: want dir, client URL, peer URL[, cert file, key file]\n", etcdProcEnv, spec)
		return 2
	}
	client, err1 := url.Parse(f[1])
	peer, err2 := url.Parse(f[2])
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: bad URL\n", etcdProcEnv, spec)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = "leasewatch"
	cfg.Dir = f[0]
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.WatchProgressNotifyInterval = 200 * time.Millisecond
	if len(f) == 5 {
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = f[3], f[4]
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {
	case <-stop:
		return 0
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
}

// etcdProcess is a real etcd in a child process, with its data in a
// temporary directory that outlives restarts.
type etcdProcess struct {
	t        *testing.T
	spec     string
	endpoint string // client URL

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startEtcdProcess starts etcd in a child process and waits until it
// serves. It is stopped when the test ends.
func startEtcdProcess(t *testing.T) *etcdProcess {
	t.Helper()
	client, peer := freeURL(t), freeURL(t)
	return runEtcdProcess(t, client, []string{t.TempDir(), client, peer})
}

// startEtcdProcessTLS is startEtcdProcess serving clients over TLS with the
// certificate and key in these files, read again at each start (and by
// etcd at each handshake).
func startEtcdProcessTLS(t *testing.T, certFile, keyFile string) *etcdProcess {
	t.Helper()
	client := strings.Replace(freeURL(t), "http://", "https://", 1)
	return runEtcdProcess(t, client, []string{t.TempDir(), client, freeURL(t), certFile, keyFile})
}

func runEtcdProcess(t *testing.T, client string, spec []string) *etcdProcess {
	t.Helper()
	p := &etcdProcess{t: t, spec: strings.Join(spec, " "), endpoint: client}
	t.Cleanup(p.stop)
	p.start()
	return p
}

// freeURL returns an http URL on a loopback port that was free a moment ago.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// start runs the child and waits for it to say it is ready.
func (p *etcdProcess) start() {
	p.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdProcEnv+"="+p.spec)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start etcd process: %v", err)
	}
	ready, eof := make(chan bool, 1), make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
		}
	}()
	done := make(chan struct{})
	go func() {
		<-eof // the pipe is read to the end before Wait closes it
		cmd.Wait()
		close(done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			p.t.Fatal("etcd process exited before it was ready")
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		p.t.Fatal("etcd process not ready after 60s")
	}
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// stop ends the child with SIGTERM (continuing it first, in case it is
// frozen) and waits for it to exit.
func (p *etcdProcess) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	testproc.Terminate(cmd.Process, done, 15*time.Second)
}

// pid returns the running child's process id.
func (p *etcdProcess) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}
