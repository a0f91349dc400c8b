package synth

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// writeSpan is how much of the history's end a write-heavy lock covers.
const writeSpan = time.Hour

// writeLock writes lock i, one of the spec's WriteLocks: an etcd lock whose
// holders change every 8 to 14 seconds over the last writeSpan, each holder
// writing to every resource about every 6 seconds, and most old holders
// sending a few late writes after their tenure ended, which the resources
// reject (stale_write) or, now and then, accept (unfenced_write).
func (g *generator) writeLock(i int) {
	r := rand.New(rand.NewPCG(g.spec.Seed, uint64(i)))
	n := i - g.spec.Locks
	key := audit.LockKey{Source: sources[0].name, Name: fmt.Sprintf("/locks/ingest/orders-%02d", n)}
	const (
		lease = 10 * time.Second
		every = lease / 3
	)
	margin := math.Round(1000*float64(lease-every)/float64(lease)) / 1000
	var holders []string
	for range 6 {
		holders = append(holders, fmt.Sprintf("%016x", r.Uint64()))
	}
	var resources []string
	for k := range g.spec.WriteResources {
		resources = append(resources, fmt.Sprintf("orders-db-%02d-%02d", n, k))
	}

	var (
		events   []audit.Event
		findings []audit.Finding
		tenures  []audit.Tenure
		writes   int
		stale    int
	)
	emit := func(e audit.Event) {
		e.Lock = key
		if e.Kind == audit.EventWriteAccepted || e.Kind == audit.EventWriteRejected {
			writes++
		}
		events = append(events, e)
	}
	find := func(f audit.Finding) {
		f.Lock = key
		f.Severity = f.Kind.Severity()
		if f.Kind == audit.FindingStaleWrite {
			stale++
		}
		findings = append(findings, f)
	}
	lk := audit.Lock{Source: key.Source, Name: key.Name, Kind: audit.KindEtcd, Class: audit.ClassLock}
	granted := g.spec.End.Add(-writeSpan)
	for seq := int64(1); granted.Before(g.spec.End); seq++ {
		holder := holders[r.IntN(len(holders))]
		if len(tenures) > 0 {
			for holder == tenures[len(tenures)-1].Holder {
				holder = holders[r.IntN(len(holders))]
			}
		}
		g.revision += 1 + r.Int64N(50)
		t := audit.Tenure{Lock: key, Seq: seq, Holder: holder, Token: audit.Int64(g.revision), GrantedAt: granted,
			LeaseDuration: lease, Position: fmt.Sprint(g.revision)}
		tok := *t.Token
		emit(audit.Event{Kind: audit.EventGrant, At: granted, Holder: holder, Token: t.Token, TTL: lease, Position: t.Position})
		length := 8*time.Second + time.Duration(r.IntN(6000))*time.Millisecond
		stop := granted.Add(length)
		held := !stop.Before(g.spec.End)
		if held {
			stop = g.spec.End
		}
		// The holder's writes: every resource, about every 6 seconds; the
		// first closes the grant's exposure window on that resource.
		for _, res := range resources {
			w := granted.Add(200*time.Millisecond + time.Duration(r.IntN(3000))*time.Millisecond)
			if w.After(stop) {
				continue
			}
			find(audit.Finding{Kind: audit.FindingExposure, At: granted, Until: w, Resource: res,
				Tokens: []int64{tok}, Holders: []string{holder},
				Summary: fmt.Sprintf("%s accepted token %d's predecessor until its first write with %d (%s)", res, tok, tok, w.Sub(granted).Round(time.Millisecond))})
			for ; !w.After(stop); w = w.Add(5*time.Second + time.Duration(r.IntN(2000))*time.Millisecond) {
				emit(audit.Event{Kind: audit.EventWriteAccepted, At: w, Holder: holder, Token: t.Token, Resource: res,
					Detail: map[string]any{"highest_token": tok}})
			}
		}
		at := granted
		for k := 1; ; k++ {
			next := granted.Add(time.Duration(k) * every)
			if next.After(stop) {
				break
			}
			at = next
			emit(audit.Event{Kind: audit.EventRenew, At: at, Holder: holder, Token: t.Token, TTL: lease, Seq: seq,
				Detail: map[string]any{"margin_ratio": margin}})
			t.Renewals++
		}
		t.LastRenewedAt, t.ExpiresAt = at, at.Add(lease)
		if held {
			lk.State, lk.Holder, lk.Token = audit.StateHeld, holder, t.Token
			lk.AcquiredAt, lk.RenewedAt, lk.ExpiresAt, lk.LeaseDuration, lk.ChangedAt = granted, at, t.ExpiresAt, lease, granted
			tenures = append(tenures, t)
			break
		}
		switch roll := r.IntN(100); {
		case roll < 85:
			t.End, t.EndedAt = audit.EndReleased, stop
			emit(audit.Event{Kind: audit.EventRelease, At: t.EndedAt, Holder: holder, Token: t.Token})
			granted = t.EndedAt.Add(time.Duration(1+r.IntN(400)) * time.Millisecond)
		case roll < 97:
			t.End, t.EndedAt = audit.EndExpired, t.ExpiresAt
			emit(audit.Event{Kind: audit.EventExpire, At: t.EndedAt, Holder: holder, Token: t.Token})
			find(audit.Finding{Kind: audit.FindingLeaseExpired, At: t.EndedAt, Holders: []string{holder}, Tokens: []int64{tok},
				Summary: fmt.Sprintf("%s stopped renewing; its lease expired %s after the last renewal", holder, lease)})
			granted = t.EndedAt.Add(time.Duration(1+r.IntN(400)) * time.Millisecond)
		default:
			t.End, t.EndedAt = audit.EndSuperseded, at.Add(lease/2)
			find(audit.Finding{Kind: audit.FindingOverlap, At: t.EndedAt, Until: t.ExpiresAt, Holders: []string{holder},
				Tokens: []int64{tok}, Summary: fmt.Sprintf("a new holder was granted while %s's lease had %s left", holder, t.ExpiresAt.Sub(t.EndedAt))})
			granted = t.EndedAt
		}
		tenures = append(tenures, t)
		// The old holder's late writes, which arrive after its tenure ended:
		// mostly rejected by the resource's fencing, now and then accepted.
		for range r.IntN(6) {
			w := t.EndedAt.Add(time.Duration(100+r.IntN(4000)) * time.Millisecond)
			if w.After(g.spec.End) {
				continue
			}
			res := resources[r.IntN(len(resources))]
			late := w.Sub(t.EndedAt).Round(time.Millisecond)
			if r.IntN(25) == 0 {
				emit(audit.Event{Kind: audit.EventWriteAccepted, At: w, Holder: holder, Token: t.Token, Resource: res})
				find(audit.Finding{Kind: audit.FindingUnfencedWrite, At: w, Resource: res, Tokens: []int64{tok}, Holders: []string{holder},
					Summary: fmt.Sprintf("%s accepted a write with token %d from a tenure that ended %s earlier", res, tok, late)})
				continue
			}
			emit(audit.Event{Kind: audit.EventWriteRejected, At: w, Holder: holder, Token: t.Token, Resource: res})
			find(audit.Finding{Kind: audit.FindingStaleWrite, At: w, Resource: res, Tokens: []int64{tok}, Holders: []string{holder},
				Summary: fmt.Sprintf("%s rejected token %d, %s after its tenure ended", res, tok, late)})
		}
		lk.State, lk.Holder, lk.Token, lk.ChangedAt = audit.StateFree, "", nil, t.EndedAt
	}

	state := audit.TrackState{Lock: lk, NextSeq: int64(len(tenures)), LastGrantToken: tenures[len(tenures)-1].Token}
	state.Recent = tenures[max(0, len(tenures)-2):]
	g.batch.Locks = append(g.batch.Locks, state)
	g.batch.Tenures = append(g.batch.Tenures, tenures...)
	g.batch.Events = append(g.batch.Events, events...)
	g.batch.Findings = append(g.batch.Findings, findings...)
	g.sum.Written = append(g.sum.Written, key)
	if len(g.sum.Written) == 1 {
		g.sum.WrittenWrites, g.sum.WrittenStale = writes, stale
	}
}
