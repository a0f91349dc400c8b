package backends

import (
	"reflect"
	"slices"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// Each backend is declared once, under its own kind, with a section of
// its own keys; Of finds it and nothing else.
func TestEveryBackendDeclaredOnce(t *testing.T) {
	want := []audit.SourceKind{audit.KindEtcd, audit.KindKubernetes, "postgres", audit.KindRedis, "zookeeper"}
	if got := Kinds(); !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %q, want %q", got, want)
	}
	for _, kind := range want {
		b, ok := Of(kind)
		if !ok || b.Kind != kind {
			t.Fatalf("Of(%q) = %q, %v", kind, b.Kind, ok)
		}
		sec := b.Section()
		if rt := reflect.TypeOf(sec); rt == nil || rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
			t.Errorf("%s: Section() = %T, want a pointer to a struct", kind, sec)
		}
		if b.Section() == sec {
			t.Errorf("%s: Section() returned the same section twice", kind)
		}
	}
	if _, ok := Of("consul"); ok {
		t.Error("Of(consul) found a backend")
	}
}
