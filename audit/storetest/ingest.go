package storetest

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The ingest benchmarks' workload, shared so that every store's figures
// come from the same inputs: IngestLocks locks, held by one holder each and
// renewed round robin, in inputs of IngestBatch observations, as a busy
// collector delivers them.
const (
	IngestLocks = 10_000
	IngestBatch = 1000
	IngestTTL   = 2 * time.Second
)

// IngestStart is the workload's clock at its grants.
var IngestStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var ingestToken = int64(1)

// IngestKey is the key of the workload's lock i.
func IngestKey(i int) audit.LockKey {
	return audit.LockKey{Source: "bench", Name: fmt.Sprintf("jobs/lock-%05d", i)}
}

func ingestHolder(i int) string { return fmt.Sprintf("worker-%03d", i%500) }

func ingestInput(obs []audit.Observation, at time.Time) audit.Input {
	return audit.Input{Source: "bench", Kind: audit.KindRedis, At: at, Observations: obs, Cursor: "seen"}
}

// IngestGrants are the inputs that grant every lock of the workload, to be
// observed before its renewals.
func IngestGrants() []audit.Input {
	var out []audit.Input
	for first := 0; first < IngestLocks; first += IngestBatch {
		obs := make([]audit.Observation, IngestBatch)
		for j := range obs {
			i := first + j
			obs[j] = audit.Observation{Lock: IngestKey(i), Kind: audit.EventGrant, At: IngestStart,
				Holder: ingestHolder(i), Token: &ingestToken, LeaseDuration: IngestTTL}
		}
		out = append(out, ingestInput(obs, IngestStart))
	}
	return out
}

// IngestRenewals returns input n (from 0) of the workload's renewals: the
// next IngestBatch locks round robin, each renewed n+1 ms after the grants.
// It also returns the first lock's index, for a baseline that writes the
// same rows.
func IngestRenewals(n int) (audit.Input, int) {
	at := IngestStart.Add(time.Duration(n+1) * time.Millisecond)
	first := n * IngestBatch % IngestLocks
	obs := make([]audit.Observation, IngestBatch)
	for j := range obs {
		i := (first + j) % IngestLocks
		obs[j] = audit.Observation{Lock: IngestKey(i), Kind: audit.EventRenew, At: at,
			Holder: ingestHolder(i), Token: &ingestToken, LeaseDuration: IngestTTL}
	}
	return ingestInput(obs, at), first
}

// IngestClock is a recorder's clock (audit.WithClock) for the ingest
// benchmarks: the wall clock, run ahead by a 64th of the recorder's sync
// interval at each input (Next). A benchmark's inputs come far quicker
// than the service's, which a sync round marks every few seconds; so the
// recorder's rounds mark about every 64 inputs, and what follows a mark
// (the renewal log's commit rows folded into bucket rows) happens within
// the timed inputs, as often as the store's writer folds.
type IngestClock struct{ ahead atomic.Int64 }

// Now is the clock's time.
func (c *IngestClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// Next moves the clock on for the next input.
func (c *IngestClock) Next() { c.ahead.Add(int64(5 * time.Second / 64)) }
