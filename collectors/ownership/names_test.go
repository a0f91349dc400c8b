package ownership

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestLeaseNames: every source name, however hostile, gives a valid Lease
// name of bounded length, and names that differ give different Leases.
func TestLeaseNames(t *testing.T) {
	names := []string{
		"prod", "Prod", "a/b", "a-b", "a_b", "", "-", "...", "ünïcödé", "名前",
		strings.Repeat("x", 500), strings.Repeat("x", 501), "UPPER case with spaces", "trailing-",
	}
	seen := make(map[string]string)
	for _, n := range names {
		for _, got := range []string{SourceLeaseName(n), MemberLeaseName(n)} {
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("Lease name of %q = %q: %v", n, got, errs)
			}
			if len(got) > 63 {
				t.Errorf("Lease name of %q = %q: %d characters, want at most 63 (a label, so it fits anywhere)", n, got, len(got))
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q and %q share the Lease name %q", n, other, got)
			}
			seen[got] = n
		}
	}
}

// TestTimingValidate names the field of each bad timing.
func TestTimingValidate(t *testing.T) {
	for _, tc := range []struct {
		timing Timing
		field  string
	}{
		{Timing{LeaseDuration: 1500 * time.Millisecond}, "lease_duration"},
		{Timing{LeaseDuration: -time.Second}, "lease_duration"},
		{Timing{RenewDeadline: -time.Second}, "renew_deadline"},
		{Timing{RenewDeadline: 15 * time.Second}, "renew_deadline"},
		{Timing{LeaseDuration: 5 * time.Second}, "renew_deadline"}, // the default 10s deadline is too long
		{Timing{RetryPeriod: -time.Second}, "retry_period"},
		{Timing{RetryPeriod: 9 * time.Second}, "retry_period"}, // 1.2 x 9s is past the 10s deadline
	} {
		err := tc.timing.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.timing, err, tc.field)
		}
	}
	if err := (Timing{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
