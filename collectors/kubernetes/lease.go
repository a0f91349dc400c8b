package kubernetes

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Marks of the kube-apiserver identity Leases: one per apiserver in
// kube-system, renewed every 10s (k8s.io/apiserver's apiserverleasegc and
// controlplane/apiserver identity lease controller).
const (
	apiserverIdentityLabel  = "apiserver.kubernetes.io/identity"
	apiserverIdentityPrefix = "apiserver-"
	namespaceKubeSystem     = "kube-system"
)

// decodeLease describes one Lease as an observation of lock namespace/name
// and reports whether the Lease is held. A held Lease is a grant (the tracker
// sees a repeat of the current tenure as a renewal); a Lease whose
// holderIdentity is unset or empty, as client-go's ReleaseOnCancel leaves it,
// is a release that names no holder or token. At and Lock.Source are the
// caller's to fill.
//
// Token is leaseTransitions (nil when unset, as in node heartbeats);
// RenewedAt is renewTime, or acquireTime when a writer sets only that, both
// on the holder's clock (for a release too) and clamped to
// audit.EarliestTime..LatestTime (the acquire_time detail keeps the Lease's
// own text); Position is the write's resourceVersion (which run.observe
// leaves out of a renewal). Its strings are made
// text by collectors.AsText.
func decodeLease(l *coordinationv1.Lease, heartbeatNS map[string]bool) (audit.Observation, bool) {
	ob, held := leaseObservation(l, heartbeatNS)
	ob.Detail = leaseDetail(l)
	return ob, held
}

// leaseDetail is the detail of an observation of l (see decodeLease), made
// text; nil when there is none.
func leaseDetail(l *coordinationv1.Lease) map[string]any {
	spec := &l.Spec
	detail := make(map[string]any)
	if l.UID != "" {
		detail["uid"] = string(l.UID)
	}
	if spec.LeaseTransitions != nil {
		detail["lease_transitions"] = int64(*spec.LeaseTransitions)
	}
	if spec.AcquireTime != nil {
		detail["acquire_time"] = spec.AcquireTime.UTC().Format(time.RFC3339Nano)
	}
	if spec.PreferredHolder != nil && *spec.PreferredHolder != "" {
		detail["preferred_holder"] = *spec.PreferredHolder
	}
	if spec.Strategy != nil && *spec.Strategy != "" {
		detail["strategy"] = string(*spec.Strategy)
	}
	if len(detail) == 0 {
		return nil
	}
	tmp := audit.Observation{Detail: detail}
	collectors.AsText(&tmp)
	return detail
}

// leaseObservation is decodeLease without the detail, which a renewal
// does without (run.observe): its strings made text.
func leaseObservation(l *coordinationv1.Lease, heartbeatNS map[string]bool) (audit.Observation, bool) {
	ob := audit.Observation{
		Lock:     audit.LockKey{Name: l.Namespace + "/" + l.Name},
		Class:    classOf(l, heartbeatNS),
		Position: l.ResourceVersion,
	}
	spec := &l.Spec
	// The apiserver takes any year from 0000 to 9999 here; a time beyond
	// what the audit trail keeps is kept as the nearest bound.
	switch {
	case spec.RenewTime != nil && !spec.RenewTime.IsZero():
		ob.RenewedAt = audit.ClampTime(spec.RenewTime.Time)
	case spec.AcquireTime != nil && !spec.AcquireTime.IsZero():
		ob.RenewedAt = audit.ClampTime(spec.AcquireTime.Time)
	}
	if spec.HolderIdentity == nil || *spec.HolderIdentity == "" {
		// client-go's release writes its own time as renewTime: the tracker
		// tells a release made in time but delivered late by it.
		ob.Kind = audit.EventRelease
		collectors.AsText(&ob)
		return ob, false
	}
	ob.Kind = audit.EventGrant
	ob.Holder = *spec.HolderIdentity
	if spec.LeaseTransitions != nil {
		ob.Token = audit.Int64(int64(*spec.LeaseTransitions))
	}
	if spec.LeaseDurationSeconds != nil && *spec.LeaseDurationSeconds > 0 {
		ob.LeaseDuration = time.Duration(*spec.LeaseDurationSeconds) * time.Second
	}
	collectors.AsText(&ob)
	return ob, true
}

// classOf tells heartbeats from locks: Leases in a heartbeat namespace (node
// leases) and kube-apiserver identity Leases only say that their holder is
// alive, and their holder never changes.
func classOf(l *coordinationv1.Lease, heartbeatNS map[string]bool) audit.Class {
	if heartbeatNS[l.Namespace] {
		return audit.ClassHeartbeat
	}
	if l.Namespace == namespaceKubeSystem {
		if _, ok := l.Labels[apiserverIdentityLabel]; ok || strings.HasPrefix(l.Name, apiserverIdentityPrefix) {
			return audit.ClassHeartbeat
		}
	}
	return audit.ClassLock
}
