package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// addStandby makes a streaming standby of the rig's PostgreSQL, synchronous
// unless async, and returns the URL of the database on both
// (target_session_attrs=primary), which the replicas are given.
func (r *replicaRig) addStandby(ctx context.Context, async bool) (string, error) {
	var err error
	if r.standby, err = pgtest.StartStandby(ctx, r.pg, pgtest.Options{}); err != nil {
		return "", err
	}
	r.async = async
	if !async {
		if err := r.pg.RequireSynchronousStandby(ctx); err != nil {
			return "", err
		}
	}
	return pgtest.FailoverURL(r.database, r.standby)
}

// failOver kills the PostgreSQL primary (every process at once, as a
// crash) and promotes its standby: an operator's failover.
func (r *replicaRig) failOver(ctx context.Context) error {
	r.pg.Kill()
	if err := r.standby.Promote(ctx); err != nil {
		return err
	}
	r.pg, r.standby = r.standby, r.pg
	return nil
}

// rebuildStandby makes the failed primary a standby of the new one, on its
// own host and port, synchronous unless the rig's is not: the rebuild of
// the failed node after a failover. Until it streams, the new primary's
// commits are its own alone.
func (r *replicaRig) rebuildStandby(ctx context.Context) error {
	if err := r.standby.Follow(ctx, r.pg); err != nil {
		return fmt.Errorf("rebuild %s as a standby of %s: %w", r.standby.Addr, r.pg.Addr, err)
	}
	if r.async {
		return nil
	}
	return r.pg.RequireSynchronousStandby(ctx)
}

// failOverDatabase runs k.kills database failovers, each at a random moment
// once every source is up again and the standby streams, and measures each:
// from the kill until every source is up again and has stored an event
// observed after the kill, and both replicas are ready.
func (k *failoverLoad) failOverDatabase(ctx context.Context, rig *replicaRig) ([]disruption, error) {
	rng := rand.New(rand.NewPCG(k.seed, 4))
	var out []disruption
	for i := range k.kills {
		if err := sleep(ctx, jitter(rng, k.every)); err != nil {
			return nil, err
		}
		d := disruption{at: time.Now(), replica: "postgresql", victim: rig.pg.Addr}
		if err := rig.failOver(ctx); err != nil {
			return nil, fmt.Errorf("database failover %d: %w", i+1, err)
		}
		if err := rig.settle(ctx, time.Minute); err != nil {
			return nil, fmt.Errorf("after database failover %d: %w", i+1, err)
		}
		if err := waitFor(ctx, time.Minute, "every replica ready and every source recording", func() bool {
			return rig.ready(ctx) && rig.recordedSince(ctx, d.at)
		}); err != nil {
			return nil, fmt.Errorf("after database failover %d: %w", i+1, err)
		}
		d.outage = time.Since(d.at)
		if err := rig.rebuildStandby(ctx); err != nil {
			return nil, fmt.Errorf("after database failover %d: %w", i+1, err)
		}
		fmt.Fprintf(rig.log, "database failover %d at %s: %s killed, %s promoted; recording resumed in %s, the standby rebuilt %s later\n",
			i+1, d.at.UTC().Format(time.StampMilli), d.victim, rig.pg.Addr, d.outage.Round(time.Millisecond), (time.Since(d.at) - d.outage).Round(time.Millisecond))
		out = append(out, d)
	}
	return out, nil
}

// ready reports whether every replica that is up answers /readyz with 200:
// its database takes writes again.
func (r *replicaRig) ready(ctx context.Context) bool {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, u := range r.urls() {
		if ctx.Err() != nil || get(client, u, "/readyz", "") != nil {
			return false
		}
	}
	return true
}

// recordedSince reports whether every source of the rig has stored an
// event observed at since or later: its recording has resumed.
func (r *replicaRig) recordedSince(ctx context.Context, since time.Time) bool {
	db, err := openDatabase(r.database)
	if err != nil {
		return false
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM source_events WHERE source = ANY($1) AND last_event_at >= $2`,
		replicaSources, since.UnixNano()).Scan(&n)
	return err == nil && n == len(replicaSources)
}
