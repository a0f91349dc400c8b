package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// The collector reads each watch's response itself rather than through
// client-go's watch.Interface. client-go decodes a stream in a goroutine of
// its own and hands every event over a channel, which the collector then
// forwards into the channel of its recording loop: at a cluster's trickle of
// heartbeats, each event woke three goroutines in turn, and the scheduler
// cost more than the decoding. Here one goroutine per watch decodes straight
// into the recording loop's channel. It also decodes the Leases without
// their managedFields, which nothing here reads (BenchmarkStreamDecoder: a
// quarter of the bytes allocated per heartbeat, half the allocations).

const (
	// protobufWatch is the media type the watches ask for. Leases are built-in
	// types, so every kube-apiserver serves them as protobuf.
	protobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
	// maxFrame bounds one watch event on the wire. etcd stores objects of at
	// most 1.5 MiB by default; a frame announcing more than this is not a
	// Lease event but a broken stream.
	maxFrame = 16 << 20
	// readBuffer is how much of a stream is read at once: about a hundred
	// heartbeat events.
	readBuffer = 64 << 10
)

// Field numbers, from the generated.proto files of k8s.io/apimachinery and
// k8s.io/api, of the messages a watch of Leases carries.
const (
	fieldWatchEventType    protowire.Number = 1 // metav1.WatchEvent.type
	fieldWatchEventObject  protowire.Number = 2 // metav1.WatchEvent.object (runtime.RawExtension)
	fieldRawExtensionRaw   protowire.Number = 1 // runtime.RawExtension.raw
	fieldUnknownTypeMeta   protowire.Number = 1 // runtime.Unknown.typeMeta
	fieldUnknownRaw        protowire.Number = 2 // runtime.Unknown.raw
	fieldTypeMetaKind      protowire.Number = 2 // runtime.TypeMeta.kind
	fieldLeaseMetadata     protowire.Number = 1 // coordinationv1.Lease.metadata
	fieldLeaseSpec         protowire.Number = 2 // coordinationv1.Lease.spec
	fieldMetaManagedFields protowire.Number = 17
)

// protobufMagic starts every object the protobuf serializer writes
// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
var protobufMagic = []byte("k8s\x00")

// openStream starts a watch of the Leases of scope ns and returns its
// response body. Errors are the apiserver's (an apierrors.APIStatus) when
// it answered.
func openStream(ctx context.Context, client rest.Interface, ns string, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = true
	req := client.Get().Namespace(ns).Resource("leases").
		VersionedParams(&opts, scheme.ParameterCodec).
		SetHeader("Accept", protobufWatch)
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return req.Stream(ctx)
}

// streamDecoder reads the events of one protobuf watch stream: each a
// length-prefixed metav1.WatchEvent whose object is a Lease (or, for an
// error, a metav1.Status) in the protobuf serializer's envelope.
type streamDecoder struct {
	r     *bufio.Reader
	frame []byte // the current frame; reused
	meta  []byte // a Lease's metadata without managedFields; reused
}

func newStreamDecoder(body io.Reader) *streamDecoder {
	return &streamDecoder{r: bufio.NewReaderSize(body, readBuffer)}
}

// next returns the stream's next event. At the stream's end it returns
// io.EOF, or the error that broke it.
func (d *streamDecoder) next() (watch.Event, error) {
	var size [4]byte
	if _, err := io.ReadFull(d.r, size[:]); err != nil {
		return watch.Event{}, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return watch.Event{}, fmt.Errorf("watch event of %d bytes, more than %d", n, maxFrame)
	}
	if cap(d.frame) < int(n) {
		d.frame = make([]byte, n)
	}
	d.frame = d.frame[:n]
	if _, err := io.ReadFull(d.r, d.frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return watch.Event{}, err
	}
	return d.decodeEvent(d.frame)
}

// decodeEvent decodes one frame of the stream.
func (d *streamDecoder) decodeEvent(frame []byte) (watch.Event, error) {
	var typ string
	var raw []byte
	err := eachField(frame, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldWatchEventType:
			typ = string(v)
		case fieldWatchEventObject:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == fieldRawExtensionRaw {
					raw = v
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return watch.Event{}, fmt.Errorf("decode watch event: %v", err) // not the stream's end, whatever protowire says
	}
	ev := watch.Event{Type: watch.EventType(typ)}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		l := &coordinationv1.Lease{}
		if err := d.decodeObject(raw, "Lease", func(b []byte) error { return d.decodeLease(b, l) }); err != nil {
			return watch.Event{}, fmt.Errorf("decode %s event: %v", typ, err)
		}
		ev.Object = l
	case watch.Error:
		st := &metav1.Status{}
		if err := d.decodeObject(raw, "Status", st.Unmarshal); err != nil {
			return watch.Event{}, fmt.Errorf("decode %s event: %v", typ, err)
		}
		ev.Object = st
	default:
		return watch.Event{}, fmt.Errorf("watch event of unknown type %q", typ)
	}
	return ev, nil
}

// decodeObject takes an object out of the protobuf serializer's envelope (the
// magic, then a runtime.Unknown naming its kind) and decodes it with
// decode, after checking that it is of the kind expected.
func (d *streamDecoder) decodeObject(raw []byte, kind string, decode func([]byte) error) error {
	body, ok := bytes.CutPrefix(raw, protobufMagic)
	if !ok {
		return errors.New("object not in protobuf")
	}
	var got string
	var obj []byte
	err := eachField(body, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldUnknownTypeMeta:
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == fieldTypeMetaKind {
					got = string(v)
				}
				return nil
			})
		case fieldUnknownRaw:
			obj = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	if got != kind {
		return fmt.Errorf("object of kind %q, want %s", got, kind)
	}
	return decode(obj)
}

// decodeLease decodes a Lease without its metadata's managedFields.
func (d *streamDecoder) decodeLease(b []byte, l *coordinationv1.Lease) error {
	return eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldLeaseMetadata:
			meta, err := stripField(d.meta[:0], v, fieldMetaManagedFields)
			if err != nil {
				return err
			}
			d.meta = meta
			return l.ObjectMeta.Unmarshal(meta)
		case fieldLeaseSpec:
			return l.Spec.Unmarshal(v)
		}
		return nil
	})
}

// eachField calls fn with the number and contents of each length-delimited
// field of the protobuf message b, in order, and skips the others.
func eachField(b []byte, fn func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := fn(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// stripField appends to dst the protobuf message b without its fields
// numbered num.
func stripField(dst, b []byte, num protowire.Number) ([]byte, error) {
	for len(b) > 0 {
		got, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(got, typ, b[n:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		if got != num {
			dst = append(dst, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return dst, nil
}

// streamEnded reports whether err ends a watch stream the way a connection
// ends (the apiserver's timeout, a dropped connection), as client-go's
// StreamWatcher treats it: the watch is reopened from the cursor. Other
// errors are a stream the collector cannot read.
func streamEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || net.IsProbableEOF(err) || net.IsTimeout(err)
}

// decodeFailure is the error event that reports a stream the collector
// cannot read, as client-go's watch reports one.
func decodeFailure(err error) watch.Event {
	st := apierrors.NewInternalError(fmt.Errorf("unable to decode an event from the watch stream: %w", err)).ErrStatus
	return watch.Event{Type: watch.Error, Object: &st}
}
