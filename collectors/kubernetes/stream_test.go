package kubernetes

import (
	"bytes"
	"io"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// watchStream writes events as a kube-apiserver's protobuf watch does: the
// streaming serializer and framer of client-go's codecs around a
// metav1.WatchEvent whose object is in the protobuf serializer's envelope.
func watchStream(t testing.TB, events ...watch.Event) *bytes.Buffer {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("client-go's codecs have no protobuf serializer")
	}
	embedded := scheme.Codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion)
	var buf bytes.Buffer
	enc := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&buf), info.StreamSerializer.Serializer)
	for _, ev := range events {
		raw, err := runtime.Encode(embedded, ev.Object)
		if err != nil {
			t.Fatalf("encode %s object: %v", ev.Type, err)
		}
		if err := enc.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}); err != nil {
			t.Fatalf("encode %s event: %v", ev.Type, err)
		}
	}
	return &buf
}

// managedLease is a held Lease as the apiserver stores it after a
// server-side apply and an update: with managedFields.
func managedLease() *coordinationv1.Lease {
	at := metav1.NewMicroTime(time.Date(2026, 12, 2, 14, 0, 0, 123456000, time.UTC))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: "node-1", Namespace: "kube-node-lease", UID: "5f0c", ResourceVersion: "4821",
			Labels:            map[string]string{"team": "a"},
			CreationTimestamp: metav1.NewTime(at.Time.Truncate(time.Second).Add(-time.Hour)), // whole seconds on the wire
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "77aa"}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:renewTime":{}}}`)},
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "coordination.k8s.io/v1",
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`)},
			},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr("node-1"), LeaseDurationSeconds: ptr[int32](40),
			RenewTime: &at, AcquireTime: &at, LeaseTransitions: ptr[int32](3),
		},
	}
}

func TestStreamDecoderDropsManagedFieldsOnly(t *testing.T) {
	l := managedLease()
	bookmark := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4900"}}
	gone := &apierrors.NewResourceExpired("too old resource version: 4000 (4800)").ErrStatus
	d := newStreamDecoder(watchStream(t,
		watch.Event{Type: watch.Modified, Object: l},
		watch.Event{Type: watch.Bookmark, Object: bookmark},
		watch.Event{Type: watch.Error, Object: gone},
	))

	want := l.DeepCopy()
	want.ManagedFields = nil
	ev := nextEvent(t, d, watch.Modified)
	if got := ev.Object.(*coordinationv1.Lease); !apiequality.Semantic.DeepEqual(got.ObjectMeta, want.ObjectMeta) || !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Fatalf("decoded Lease:\n%+v\nwant the Lease without managedFields:\n%+v", got, want)
	}
	ev = nextEvent(t, d, watch.Bookmark)
	if rv := ev.Object.(*coordinationv1.Lease).ResourceVersion; rv != "4900" {
		t.Fatalf("bookmark resourceVersion = %q, want 4900", rv)
	}
	ev = nextEvent(t, d, watch.Error)
	if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) {
		t.Fatalf("error event = %v, want the apiserver's 410 Gone", err)
	}
	if _, err := d.next(); err != io.EOF {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
}

func nextEvent(t *testing.T, d *streamDecoder, typ watch.EventType) watch.Event {
	t.Helper()
	ev, err := d.next()
	if err != nil {
		t.Fatalf("decode %s event: %v", typ, err)
	}
	if ev.Type != typ {
		t.Fatalf("event type = %s, want %s", ev.Type, typ)
	}
	return ev
}

func TestStreamDecoderBrokenStreams(t *testing.T) {
	frame := watchStream(t, watch.Event{Type: watch.Modified, Object: managedLease()}).Bytes()
	other := watchStream(t, watch.Event{Type: watch.Modified, Object: &metav1.Status{Status: metav1.StatusSuccess}}).Bytes()
	tests := []struct {
		name   string
		stream []byte
		ended  bool // read as a dropped connection, reopened from the cursor
	}{
		{"CutInTheLengthPrefix", frame[:2], true},
		{"CutInTheEvent", frame[:len(frame)-5], true},
		{"HugeFrame", []byte{0x7f, 0xff, 0xff, 0xff}, false},
		{"NotAnEvent", append([]byte{0, 0, 0, 3}, 0xff, 0xff, 0xff), false},
		{"NotALease", other, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newStreamDecoder(bytes.NewReader(tt.stream)).next()
			if err == nil {
				t.Fatal("decoded an event from a broken stream")
			}
			if got := streamEnded(err); got != tt.ended {
				t.Fatalf("streamEnded(%v) = %v, want %v", err, got, tt.ended)
			}
			if !tt.ended {
				ev := decodeFailure(err)
				if got := apierrors.FromObject(ev.Object); !apierrors.IsInternalError(got) {
					t.Fatalf("error event for %v = %v, want an internal error", err, got)
				}
			}
		})
	}
}

// BenchmarkStreamDecoder compares decoding a heartbeat's watch event here
// with client-go's decoder of the same stream.
func BenchmarkStreamDecoder(b *testing.B) {
	frame := watchStream(b, watch.Event{Type: watch.Modified, Object: managedLease()}).Bytes()
	b.Run("Partial", func(b *testing.B) {
		b.ReportAllocs()
		r := bytes.NewReader(nil)
		d := newStreamDecoder(r)
		for b.Loop() {
			r.Reset(frame)
			d.r.Reset(r)
			if _, err := d.next(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ClientGo", func(b *testing.B) {
		b.ReportAllocs()
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
		objects := scheme.Codecs.UniversalDeserializer()
		for b.Loop() {
			frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(frame)))
			var ev metav1.WatchEvent
			if _, _, err := streaming.NewDecoder(frames, info.StreamSerializer.Serializer).Decode(nil, &ev); err != nil {
				b.Fatal(err)
			}
			if _, _, err := objects.Decode(ev.Object.Raw, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
