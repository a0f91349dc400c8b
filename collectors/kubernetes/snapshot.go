package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasewatch/leasewatch/audit"
)

// snapshotChunk is the default of Collector.snapshotChunk: how many held
// Leases a first snapshot records an input. The tracker's changes, events and
// lock rows of one input are all in memory until it is stored, about 2 KB a
// Lease: in one input, 130,000 Leases' took hundreds of MiB at once.
const snapshotChunk = 10_000

// snapshot lists the Leases and records every held one in one Snapshot input
// whose cursor is the list's resourceVersion: as observed on a first start,
// or, after a blind window, as an inferred grant (the tracker keeps a tenure
// whose holder and token did not change, and ends the ones that are gone).
// A Lease whose holder let it run out by the collector's clock is not held.
//
// A first start records the held Leases snapshotChunk an input as the
// list's pages bring them (listing.recordAhead), the last input with the
// cursor: it has recorded nothing of the source yet (no cursor is stored), so
// no tenure is there for a Snapshot input to end. At 130,000 Leases the
// whole list's observations, held until it was read to the end, raised the
// process's peak by about 50 MiB.
func (r *run) snapshot(ctx context.Context, blind *audit.Blind) error {
	l := listing{r: r, ahead: blind == nil}
	rvs := make(map[string]string, len(r.c.scopes))
	for _, ns := range r.c.scopes {
		rv, err := r.list(ctx, ns, &l)
		if err != nil {
			return err
		}
		rvs[ns] = rv
	}
	now := r.now()
	kind, inferred := audit.EventObserved, false
	if blind != nil {
		kind, inferred = audit.EventGrant, true
		blind.To = now
	}
	obs := r.stamp(l.held, now, kind, inferred)
	slices.SortFunc(obs, func(a, b audit.Observation) int { return strings.Compare(a.Lock.Name, b.Lock.Name) })
	in := r.input(now, obs, rvs)
	// A list is current as of now. After chunks recorded ahead the input
	// is no Snapshot: it lists only the last of the held Leases.
	in.Blind, in.Snapshot, in.Live = blind, l.recorded == 0, true
	if err := r.sink.Record(ctx, in); err != nil {
		return fmt.Errorf("record snapshot at resourceVersion %s: %w", in.Cursor, err)
	}
	r.leases = l.leases
	r.rv, r.rvAt = rvs, now
	r.log.Info("snapshot recorded", "cursor", in.Cursor, "leases", len(l.leases), "held", l.recorded+len(obs), "blind", blind != nil)
	return nil
}

// listing is one snapshot's list as its pages come: every Lease as last
// written, which the watch that follows goes on from, and the observations
// of the held ones not recorded yet.
type listing struct {
	r *run
	// ahead says the held Leases are recorded snapshotChunk an input as
	// the pages come (a first start), not all at the end.
	ahead  bool
	leases map[string]seen
	held   []audit.Observation
	// scope is where the scope being listed starts in held; recorded, how
	// many held Leases were recorded ahead.
	scope    int
	recorded int
}

// page adds one page of a list, each Lease decoded as it came (decodeLease;
// a grant when held): the page's Leases, managedFields and all, are dropped
// as soon as it is read. The map of Leases, and when all is recorded at the
// end the held ones' observations, are sized at the first page for the whole
// list where the apiserver says how many remain, so that 130,000 Leases are
// not copied to ever larger tables.
func (l *listing) page(ctx context.Context, page *coordinationv1.LeaseList) error {
	if l.leases == nil {
		n := len(page.Items)
		if page.RemainingItemCount != nil && *page.RemainingItemCount > 0 {
			n += int(*page.RemainingItemCount)
		}
		l.leases = make(map[string]seen, n)
		if !l.ahead {
			l.held = make([]audit.Observation, 0, n)
		}
	}
	for i := range page.Items {
		ob, held := decodeLease(&page.Items[i], l.r.c.heartbeatNS)
		l.leases[ob.Lock.Name] = seenOf(ob)
		if held {
			l.held = append(l.held, ob)
		}
	}
	if l.ahead {
		return l.recordAhead(ctx)
	}
	return nil
}

// recordAhead records the held Leases listed so far but the last
// snapshotChunk or fewer, snapshotChunk an input, in the order listed (the
// apiserver lists by name). The inputs carry no cursor and vouch for
// nothing (Input.Live): a restart in between lists again, and the tracker
// takes each Lease seen again for the same tenure.
func (l *listing) recordAhead(ctx context.Context) error {
	r, n := l.r, l.r.c.snapshotChunk
	for len(l.held) > n {
		now := r.now()
		// The input's own copy: held goes on with the next pages.
		chunk := r.stamp(slices.Clone(l.held[:n]), now, audit.EventObserved, false)
		if len(chunk) > 0 {
			in := r.input(now, chunk, nil)
			in.Cursor = ""
			if err := r.sink.Record(ctx, in); err != nil {
				return fmt.Errorf("record snapshot's Leases up to %s: %w", chunk[len(chunk)-1].Lock.Name, err)
			}
		}
		rest := copy(l.held, l.held[n:])
		clear(l.held[rest:])
		l.held = l.held[:rest]
		l.scope = max(l.scope-n, 0)
		l.recorded += len(chunk)
	}
	return nil
}

// restartScope forgets the held Leases of the scope being listed that are
// not recorded yet, for a list that starts over.
func (l *listing) restartScope() {
	clear(l.held[l.scope:])
	l.held = l.held[:l.scope]
}

// stamp keeps the observations of obs (held Leases) whose lease has not run
// out by now, as kind at now, in place.
func (r *run) stamp(obs []audit.Observation, now time.Time, kind audit.EventKind, inferred bool) []audit.Observation {
	kept := obs[:0]
	for _, ob := range obs {
		if audit.LeaseRunOut(audit.LeaseExpiry(ob.RenewedAt, ob.LeaseDuration), now) {
			continue
		}
		ob.Lock.Source, ob.Kind, ob.Inferred, ob.At = r.c.cfg.Name, kind, inferred, now
		kept = append(kept, ob)
	}
	clear(obs[len(kept):])
	return kept
}

// list reads every Lease of one scope into l, page by page, and returns the
// list's resourceVersion. A continue token that expired midway (the pages
// are served from one snapshot, which compaction can remove) starts the
// list over.
func (r *run) list(ctx context.Context, ns string, l *listing) (string, error) {
	l.scope = len(l.held)
	for attempt := 0; ; attempt++ {
		rv, err := r.listOnce(ctx, ns, l)
		if err != nil && apierrors.IsResourceExpired(err) && attempt < 3 {
			r.log.Info("list continuation expired; listing again", "scope", scopeName(ns), "err", err)
			l.restartScope()
			continue
		}
		return rv, err
	}
}

func (r *run) listOnce(ctx context.Context, ns string, l *listing) (string, error) {
	opts := metav1.ListOptions{Limit: int64(r.c.listPage)}
	for {
		lctx, cancel := context.WithTimeout(ctx, listTimeout)
		page, err := r.c.client.CoordinationV1().Leases(ns).List(lctx, opts)
		cancel()
		if err != nil {
			return "", fmt.Errorf("list Leases %s: %w", scopeName(ns), err)
		}
		if err := l.page(ctx, page); err != nil {
			return "", err
		}
		if page.Continue == "" {
			return page.ResourceVersion, nil
		}
		opts.Continue = page.Continue
	}
}
