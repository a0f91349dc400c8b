package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
)

// A kube-apiserver on the load's 2 cores renews a few thousand Leases a
// second at most, and a 130,000-node cluster's kubelets renew 13,000. So
// the load records a real apiserver's watch stream once (the raw frames a
// watch of heartbeat Leases delivers, as the collector receives them, and
// its /version) and replays it to leasewatch from an HTTP/2 server over TLS
// of its own at the rate asked: each renewal is a recorded frame with the
// Lease's name, resourceVersion and renewTime written in, and leasewatch's
// collector reads and decodes it as it would the apiserver's. The replay
// server answers only what the collector asks: /version, lists of the
// heartbeat namespace's Leases by page, and watches from a resourceVersion.

const (
	// protobufWatch is the media type of a protobuf watch stream, which the
	// collector asks for.
	protobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
	// recordedLeases is how many heartbeat Leases the recording renews once
	// each: the frames the replay takes its renewals from, in turn.
	recordedLeases = 16
	// replayFlushEvery is how often the replay writes out the renewals that
	// came due. A real apiserver flushes a watch whenever its queue is empty,
	// which at these rates is every few events.
	replayFlushEvery = 5 * time.Millisecond
	// heartbeatSeconds is a kubelet's Lease duration.
	heartbeatSeconds = 40
)

// recording is a real apiserver's watch of heartbeat Leases: its frames as
// received (each a length-prefixed metav1.WatchEvent), and its /version.
type recording struct {
	frames  []byte
	version []byte
}

// recordFromTestAPIServer starts a test kube-apiserver on an embedded etcd
// in dir, records its watch (recordWatch) and stops it.
func recordFromTestAPIServer(ctx context.Context, dir string, log io.Writer) (recording, error) {
	fmt.Fprintf(log, "recording a test kube-apiserver's watch of %d heartbeat Lease renewals\n", recordedLeases)
	api, err := kubetest.Start(ctx, dir, io.Discard)
	if err != nil {
		return recording{}, err
	}
	defer api.Stop()
	cs, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		return recording{}, err
	}
	return recordWatch(ctx, cs, heartbeatNS)
}

// recordWatch creates recordedLeases heartbeat Leases in ns as kubelets do
// (no leaseTransitions, no acquireTime), renews each once while watching
// them, and returns the watch's frames and the apiserver's /version.
func recordWatch(ctx context.Context, cs kubernetes.Interface, ns string) (recording, error) {
	leases := cs.CoordinationV1().Leases(ns)
	var rv string
	for i := range recordedLeases {
		name := fmt.Sprintf("node-%d", i)
		l, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](heartbeatSeconds),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
		}, metav1.CreateOptions{FieldManager: "kubelet"})
		if err != nil {
			return recording{}, fmt.Errorf("create Lease to record: %w", err)
		}
		rv = l.ResourceVersion
	}
	body, err := cs.CoordinationV1().RESTClient().Get().Namespace(ns).Resource("leases").
		VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: rv}, scheme.ParameterCodec).
		SetHeader("Accept", protobufWatch).Stream(ctx)
	if err != nil {
		return recording{}, fmt.Errorf("watch Leases to record: %w", err)
	}
	defer body.Close()
	for i := range recordedLeases {
		l, err := leases.Get(ctx, fmt.Sprintf("node-%d", i), metav1.GetOptions{})
		if err != nil {
			return recording{}, err
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil {
			return recording{}, fmt.Errorf("renew Lease to record: %w", err)
		}
	}
	var rec recording
	r := bufio.NewReader(body)
	for range recordedLeases {
		frame, err := readFrame(r)
		if err != nil {
			return recording{}, fmt.Errorf("read the recorded watch: %w", err)
		}
		rec.frames = append(rec.frames, frame...)
	}
	if rec.version, err = cs.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(ctx); err != nil {
		return recording{}, fmt.Errorf("read /version to record: %w", err)
	}
	return rec, nil
}

// readFrame reads one length-prefixed frame of a watch stream, its prefix
// included.
func readFrame(r io.Reader) ([]byte, error) {
	frame := make([]byte, 4)
	if _, err := io.ReadFull(r, frame); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(frame)
	if n > 16<<20 {
		return nil, fmt.Errorf("watch frame of %d bytes", n)
	}
	frame = append(frame, make([]byte, n)...)
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// save writes the recording to dir (replay --frames reads it back).
func (rec recording) save(dir string) (string, error) {
	path := filepath.Join(dir, "heartbeat-watch.frames")
	if err := os.WriteFile(path, rec.frames, 0o600); err != nil {
		return "", err
	}
	return path, os.WriteFile(path+".version", rec.version, 0o600)
}

func loadRecording(path string) (recording, error) {
	var rec recording
	var err error
	if rec.frames, err = os.ReadFile(path); err != nil {
		return rec, err
	}
	rec.version, err = os.ReadFile(path + ".version")
	return rec, err
}

// frameTemplate is one recorded renewal: the Lease, and the envelope the
// apiserver's protobuf serializer put it in.
type frameTemplate struct {
	envelope runtime.Unknown // Raw left out
	lease    coordinationv1.Lease
}

// templates decodes the recorded frames.
func (rec recording) templates() ([]frameTemplate, error) {
	var out []frameTemplate
	r := bytes.NewReader(rec.frames)
	for r.Len() > 0 {
		frame, err := readFrame(r)
		if err != nil {
			return nil, err
		}
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame[4:]); err != nil {
			return nil, fmt.Errorf("recorded frame: %w", err)
		}
		body, ok := bytes.CutPrefix(ev.Object.Raw, []byte("k8s\x00"))
		if ev.Type != "MODIFIED" || !ok {
			return nil, fmt.Errorf("recorded frame: a %s event, not a protobuf MODIFIED", ev.Type)
		}
		var t frameTemplate
		if err := t.envelope.Unmarshal(body); err != nil {
			return nil, fmt.Errorf("recorded frame's object: %w", err)
		}
		if err := t.lease.Unmarshal(t.envelope.Raw); err != nil {
			return nil, fmt.Errorf("recorded frame's Lease: %w", err)
		}
		t.envelope.Raw = nil
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("the recording holds no frames")
	}
	return out, nil
}

// replayServer serves n heartbeat Leases, each renewed once per period,
// evenly spread, from start: renewal k (0, 1, 2, ...) is of Lease k mod n,
// at start + k*period/n, and leaves resourceVersion base+k+1. Before start
// each Lease shows the renewal one period before its first.
type replayServer struct {
	tmpl    []frameTemplate
	version []byte
	n       int
	period  time.Duration
	start   time.Time
	base    int64 // resourceVersions up to base are the Leases' creation
	srv     *httptest.Server
	proto   runtime.Serializer

	listedAt atomic.Int64 // the renewals made when the first list was served; -1 before
	end      atomic.Int64 // the renewals made when the load stopped; -1 while it runs
}

func startReplay(rec recording, n int, period time.Duration) (*replayServer, error) {
	tmpl, err := rec.templates()
	if err != nil {
		return nil, err
	}
	s := &replayServer{tmpl: tmpl, version: rec.version, n: n, period: period, start: time.Now(),
		base: int64(1000 + n), proto: protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)}
	s.listedAt.Store(-1)
	s.end.Store(-1)
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.EnableHTTP2 = true
	s.srv.StartTLS()
	return s, nil
}

func (s *replayServer) close() { s.srv.Close() }

// kubeconfig writes a kubeconfig for the replay server into dir.
func (s *replayServer) kubeconfig(dir string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	cfg.Clusters["replay"] = &clientcmdapi.Cluster{Server: s.srv.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["replay"] = &clientcmdapi.AuthInfo{Token: "replay"}
	cfg.Contexts["replay"] = &clientcmdapi.Context{Cluster: "replay", AuthInfo: "replay"}
	cfg.CurrentContext = "replay"
	path := filepath.Join(dir, "replay.kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// made is how many renewals have been made by t (all of them once the load
// stopped).
func (s *replayServer) made(t time.Time) int64 {
	k := max(int64(t.Sub(s.start))*int64(s.n)/int64(s.period), 0)
	if end := s.end.Load(); end >= 0 {
		k = min(k, end)
	}
	return k
}

// stop ends the renewals: none is made after now.
func (s *replayServer) stop() int64 {
	s.end.Store(s.made(time.Now()))
	return s.end.Load()
}

// renewedAt is the renewTime of renewal k, at the microsecond precision the
// apiserver keeps.
func (s *replayServer) renewedAt(k int64) time.Time {
	return s.start.Add(time.Duration(k * int64(s.period) / int64(s.n))).Truncate(time.Microsecond)
}

// newest is Lease i's newest renewal once made renewals were made: i - n
// (the one before start) when its first has not come yet.
func (s *replayServer) newest(i int, made int64) int64 {
	n := int64(s.n)
	k := int64(i)
	if made > k {
		k += (made - 1 - k) / n * n
	} else {
		k -= n
	}
	return k
}

// rv is the resourceVersion renewal k of Lease i left.
func (s *replayServer) rv(i int, k int64) string {
	if k < 0 {
		return strconv.FormatInt(1000+int64(i)+1, 10)
	}
	return strconv.FormatInt(s.base+k+1, 10)
}

// lease is Lease i as renewal k left it.
func (s *replayServer) lease(i int, k int64) coordinationv1.Lease {
	l := s.tmpl[i%len(s.tmpl)].lease
	name := "node-" + strconv.Itoa(i)
	l.Name, l.Namespace = name, heartbeatNS
	l.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
	l.ResourceVersion = s.rv(i, k)
	l.Spec.HolderIdentity = &name
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(s.renewedAt(k)))
	return l
}

// frame is renewal k as the apiserver writes it to a watch.
func (s *replayServer) frame(k int64) ([]byte, error) {
	i := int(k % int64(s.n))
	l := s.lease(i, k)
	raw, err := l.Marshal()
	if err != nil {
		return nil, err
	}
	u := s.tmpl[i%len(s.tmpl)].envelope
	u.Raw = raw
	obj, err := u.Marshal()
	if err != nil {
		return nil, err
	}
	ev := metav1.WatchEvent{Type: "MODIFIED", Object: runtime.RawExtension{Raw: append([]byte("k8s\x00"), obj...)}}
	b, err := ev.Marshal()
	if err != nil {
		return nil, err
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...), nil
}

func (s *replayServer) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/version":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.version)
	case r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/"+heartbeatNS+"/leases" && r.URL.Query().Get("watch") == "true":
		s.watch(w, r)
	case r.URL.Path == "/apis/coordination.k8s.io/v1/namespaces/"+heartbeatNS+"/leases":
		s.list(w, r)
	default:
		http.Error(w, "the replay serves only what leasewatch's collector asks of heartbeat Leases", http.StatusNotFound)
	}
}

// list serves one page of the Leases, as of the renewals made when the
// list's first page was asked for (its continue token carries that).
func (s *replayServer) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = s.n
	}
	made, from := s.made(time.Now()), 0
	if c := q.Get("continue"); c != "" {
		m, f, ok := strings.Cut(c, ":")
		var err1, err2 error
		made, err1 = strconv.ParseInt(m, 10, 64)
		from, err2 = strconv.Atoi(f)
		if !ok || err1 != nil || err2 != nil {
			http.Error(w, "bad continue token", http.StatusBadRequest)
			return
		}
	} else {
		s.listedAt.CompareAndSwap(-1, made)
	}
	list := &coordinationv1.LeaseList{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "LeaseList"}}
	list.ResourceVersion = strconv.FormatInt(s.base+made, 10)
	to := min(from+limit, s.n)
	for i := from; i < to; i++ {
		list.Items = append(list.Items, s.lease(i, s.newest(i, made)))
	}
	if to < s.n {
		list.Continue = fmt.Sprintf("%d:%d", made, to)
	}
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
	if err := s.proto.Encode(list, w); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// watch streams the renewals after the resourceVersion asked for as they
// come due, until the request's timeoutSeconds.
func (s *replayServer) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rv, err := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	if err != nil || rv < s.base {
		http.Error(w, "the replay watches only from a resourceVersion it listed", http.StatusGone)
		return
	}
	timeout, _ := strconv.Atoi(q.Get("timeoutSeconds"))
	if timeout <= 0 {
		timeout = 300
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(timeout)*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", protobufWatch)
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush()
	tick := time.NewTicker(replayFlushEvery)
	defer tick.Stop()
	for next := rv - s.base; ; {
		for due := s.made(time.Now()); next < due; next++ {
			frame, err := s.frame(next)
			if err != nil {
				return
			}
			if _, err := w.Write(frame); err != nil {
				return
			}
		}
		flusher.Flush()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// writes are the renewals Lease i was sent from the first list on, up to
// end: what leasewatch must have recorded beyond the list's observation.
func (s *replayServer) writes(i int, listed, end int64) *lease {
	first := s.newest(i, listed)
	l := &lease{name: heartbeatNS + "/node-" + strconv.Itoa(i), created: s.rv(i, first)}
	prev := s.renewedAt(first)
	for k := first + int64(s.n); k < end; k += int64(s.n) {
		at := s.renewedAt(k)
		l.writes = append(l.writes, leaseWrite{rv: s.rv(i, k), renewed: at, deadline: prev.Add(heartbeatSeconds * time.Second)})
		prev = at
	}
	return l
}

// runReplay is the kubernetes scenario with its heartbeats replayed from a
// recorded watch (k.replay): no election Leases, and no apiserver while
// leasewatch is measured.
func (k *kubeLoad) runReplay(ctx context.Context, out, log io.Writer, dir string) error {
	bin := k.leasewatch
	var err error
	if bin == "" {
		if bin, err = buildLeasewatch(ctx, dir, log); err != nil {
			return err
		}
	}
	var rec recording
	if k.frames != "" {
		rec, err = loadRecording(k.frames)
	} else if rec, err = recordFromTestAPIServer(ctx, filepath.Join(dir, "record"), log); err == nil && k.keep {
		var path string
		path, err = rec.save(dir)
		fmt.Fprintf(log, "recorded frames kept in %s (--frames reads them back)\n", path)
	}
	if err != nil {
		return err
	}
	srv, err := startReplay(rec, k.heartbeats, k.heartbeatEvery)
	if err != nil {
		return err
	}
	defer srv.close()
	kubeconfig, err := srv.kubeconfig(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "replaying %d heartbeat Leases renewed every %s at %s\n", k.heartbeats, k.heartbeatEvery, srv.srv.URL)
	lw, err := startLeasewatch(ctx, bin, dir, "", fmt.Sprintf(`  - name: %s
    kind: kubernetes
    kubeconfig: %s
    namespaces: [%s]
    heartbeat_namespaces: [%s]
`, loadSource, kubeconfig, heartbeatNS, heartbeatNS), log)
	if err != nil {
		return err
	}
	defer lw.stop()
	snapshot := max(time.Minute, time.Duration(k.heartbeats)*time.Millisecond)
	if err := waitFor(ctx, snapshot, "leasewatch to record the first snapshot", func() bool {
		return recorded(ctx, lw.url, loadSource, "") >= float64(k.heartbeats)
	}); err != nil {
		return err
	}
	fmt.Fprintf(log, "replaying for %s of warm-up and %s measured\n", k.warmup, k.duration)
	w, err := measure(ctx, lw.url, lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	if err != nil {
		return err
	}
	end, listed := srv.stop(), srv.listedAt.Load()
	all := make([]*lease, k.heartbeats)
	for i := range all {
		all[i] = srv.writes(i, listed, end)
	}
	offered := float64(k.heartbeats) / k.heartbeatEvery.Seconds()
	title := fmt.Sprintf("leasewatch-load kubernetes --replay: %d heartbeat Leases every %s (%.0f renewals/s offered), "+
		"replayed from a kube-apiserver's recorded watch frames over HTTP/2 and TLS (a real apiserver on this machine cannot write that many), "+
		"%s measured after %s warm-up; lag is renewTime → stored", k.heartbeats, k.heartbeatEvery, offered, k.duration, k.warmup)
	return verify(ctx, out, dir, lw.url, all, w, title, [][2]string{
		{"renewals replayed", fmt.Sprintf("%.0f/s (%d, %d of them after the first list)", float64(end)/time.Since(srv.start).Seconds(), end, end-listed)},
	})
}
