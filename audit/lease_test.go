package audit_test

import (
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

func TestLeaseExpiry(t *testing.T) {
	for _, tt := range []struct {
		name     string
		renewed  time.Time
		duration time.Duration
		want     time.Time
	}{
		{"RenewalPlusDuration", t0, 10 * time.Second, at(10 * time.Second)},
		{"ZeroDurationNeverRunsOut", t0, 0, time.Time{}},
		{"NegativeDurationNeverRunsOut", t0, -time.Second, time.Time{}},
		{"ZeroRenewalTimeNeverRunsOut", time.Time{}, 10 * time.Second, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := audit.LeaseExpiry(tt.renewed, tt.duration); !got.Equal(tt.want) {
				t.Errorf("LeaseExpiry(%v, %s) = %v, want %v", tt.renewed, tt.duration, got, tt.want)
			}
		})
	}
}

func TestLeaseRunOut(t *testing.T) {
	expires := audit.LeaseExpiry(t0, 10*time.Second)
	for _, tt := range []struct {
		name    string
		expires time.Time
		at      time.Time
		want    bool
	}{
		{"ANanosecondBeforeExpiry", expires, expires.Add(-time.Nanosecond), false},
		{"ExactlyAtExpiry", expires, expires, true},
		{"AfterExpiry", expires, expires.Add(time.Hour), true},
		{"AtTheZeroTime", expires, time.Time{}, false},
		{"ZeroDurationLongAfter", audit.LeaseExpiry(t0, 0), at(1000 * time.Hour), false},
		{"ZeroRenewalTimeLongAfter", audit.LeaseExpiry(time.Time{}, 10*time.Second), at(1000 * time.Hour), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := audit.LeaseRunOut(tt.expires, tt.at); got != tt.want {
				t.Errorf("LeaseRunOut(%v, %v) = %v, want %v", tt.expires, tt.at, got, tt.want)
			}
		})
	}
}

func TestObservationRenewed(t *testing.T) {
	if got := (audit.Observation{At: at(time.Minute), RenewedAt: t0}).Renewed(); !got.Equal(t0) {
		t.Errorf("with a renewal time: Renewed() = %v, want the renewal time %v", got, t0)
	}
	if got := (audit.Observation{At: at(time.Minute)}).Renewed(); !got.Equal(at(time.Minute)) {
		t.Errorf("without a renewal time: Renewed() = %v, want when it was seen %v", got, at(time.Minute))
	}
}
