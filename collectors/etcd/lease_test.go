package etcd

import (
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestLeaseFold(t *testing.T) {
	polled := leaseInfo{granted: 10, ttl: 5, polled: t0, term: 2}
	tests := []struct {
		name        string
		prev        leaseInfo
		r           ttlReading
		wantRenewed bool
		wantAt      time.Time
		wantInfo    leaseInfo
	}{
		{"FirstReadingIsABaseline", leaseInfo{}, ttlReading{ttl: 9, granted: 10, term: 2, at: t0},
			false, time.Time{}, leaseInfo{granted: 10, ttl: 9, polled: t0, term: 2}},
		{"CountingDownIsNoRenewal", polled, ttlReading{ttl: 4, granted: 10, term: 2, at: t0.Add(ms(500))},
			false, time.Time{}, leaseInfo{granted: 10, ttl: 4, polled: t0.Add(ms(500)), term: 2}},
		{"RoundingIsNoRenewal", polled, ttlReading{ttl: 5, granted: 10, term: 2, at: t0.Add(ms(900))},
			false, time.Time{}, leaseInfo{granted: 10, ttl: 5, polled: t0.Add(ms(900)), term: 2}},
		{"KeepaliveSeenAsRenewal", polled, ttlReading{ttl: 8, granted: 10, term: 2, at: t0.Add(3 * time.Second)},
			true, t0.Add(time.Second), leaseInfo{granted: 10, ttl: 8, polled: t0.Add(3 * time.Second), term: 2}},
		{"RenewalNotBeforePreviousPoll", polled, ttlReading{ttl: 9, granted: 10, term: 2, at: t0.Add(ms(500))},
			true, t0.Add(time.Nanosecond), leaseInfo{granted: 10, ttl: 9, polled: t0.Add(ms(500)), term: 2}},
		{"LeaderChangePromoteIsNoRenewal", polled, ttlReading{ttl: 10, granted: 10, term: 3, at: t0.Add(ms(500))},
			false, time.Time{}, leaseInfo{granted: 10, ttl: 10, polled: t0.Add(ms(500)), term: 3}},
		{"GoneKeepsLastAliveReading", polled, ttlReading{ttl: -1, term: 2, at: t0.Add(ms(500))},
			false, time.Time{}, leaseInfo{granted: 10, ttl: 5, polled: t0, term: 2, gone: true}},
		{"OlderAnswerIgnored", polled, ttlReading{ttl: 9, granted: 10, term: 2, at: t0.Add(-time.Second)},
			false, time.Time{}, polled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, at, renewed := tt.prev.fold(tt.r)
			if renewed != tt.wantRenewed || !at.Equal(tt.wantAt) {
				t.Fatalf("renewed = %v at %s, want %v at %s", renewed, at, tt.wantRenewed, tt.wantAt)
			}
			if next != tt.wantInfo {
				t.Fatalf("info = %+v, want %+v", next, tt.wantInfo)
			}
		})
	}
}

func TestClassifyEnd(t *testing.T) {
	polled := func(ttl int64) leaseInfo { return leaseInfo{granted: 10, ttl: ttl, polled: t0, term: 1} }
	tests := []struct {
		name         string
		lease        int64
		li           leaseInfo
		ttl          int64
		now          time.Time
		want         audit.EventKind
		wantInferred bool
		wantRevoked  bool
		wantUnjudged bool
	}{
		{"UnlockLeavesLeaseAlive", 7, polled(9), 9, t0.Add(ms(100)), audit.EventRelease, false, false, false},
		{"LeaselessKey", 0, leaseInfo{}, -1, t0, audit.EventRelease, false, false, false},
		{"SessionCloseRevokesEarly", 7, polled(9), -1, t0.Add(ms(300)), audit.EventRelease, false, true, false},
		{"ExpiredOnTime", 7, polled(1), -1, t0.Add(ms(1200)), audit.EventExpire, false, false, false},
		{"ExpiredWithinRounding", 7, polled(5), -1, t0.Add(4 * time.Second), audit.EventExpire, false, false, false},
		{"RevokedJustBeforeTheWindow", 7, polled(5), -1, t0.Add(ms(3900)), audit.EventRelease, false, true, false},
		// Gone before a resume read it: the tracker judges it by the lease.
		{"NeverSeenAlive", 7, leaseInfo{}, -1, t0, audit.EventRelease, true, false, true},
		{"GoneAtTheBaseline", 7, leaseInfo{gone: true}, -1, t0, audit.EventRelease, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := classifyEnd(tt.lease, tt.li, tt.ttl, tt.now)
			revoked, _ := v.detail["revoked"].(bool)
			if v.kind != tt.want || v.inferred != tt.wantInferred || revoked != tt.wantRevoked || v.unjudged != tt.wantUnjudged {
				t.Fatalf("verdict = %s inferred=%v revoked=%v unjudged=%v (%v), want %s inferred=%v revoked=%v unjudged=%v",
					v.kind, v.inferred, revoked, v.unjudged, v.detail["reason"], tt.want, tt.wantInferred, tt.wantRevoked, tt.wantUnjudged)
			}
		})
	}
}
