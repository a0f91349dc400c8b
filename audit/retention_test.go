package audit

import (
	"reflect"
	"testing"
	"time"
)

func TestRetentionEventRules(t *testing.T) {
	day := 24 * time.Hour
	r := Retention{Events: 90 * day, Kinds: map[EventKind]time.Duration{
		EventRenew: 7 * day, EventWriteAccepted: 7 * day, EventGrant: 0, EventBlind: 30 * day,
	}}
	want := []EventRule{
		{Kinds: []EventKind{EventRenew, EventWriteAccepted}, Age: 7 * day},
		{Kinds: []EventKind{EventBlind}, Age: 30 * day},
		// Every kind not named: a kind named with 0 is kept forever.
		{Kinds: []EventKind{EventBlind, EventGrant, EventRenew, EventWriteAccepted}, Others: true, Age: 90 * day},
	}
	if got := r.EventRules(); !reflect.DeepEqual(got, want) {
		t.Errorf("EventRules = %+v, want %+v", got, want)
	}
	if !want[2].Governs(EventRelease) || want[2].Governs(EventGrant) || !want[0].Governs(EventRenew) || want[0].Governs(EventRelease) {
		t.Error("Governs disagrees with the rules' kinds")
	}
	if r.Keeps() {
		t.Error("Keeps = true for a retention that prunes")
	}
	if !(Retention{Kinds: map[EventKind]time.Duration{EventRenew: 0}}).Keeps() {
		t.Error("Keeps = false for a retention of zeros")
	}
}
