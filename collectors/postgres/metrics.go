package postgres

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/collectors"
)

// retainedDesc is the family of a source's slot's retained WAL, the source
// a constant label: each source's collector registers its own series, and
// a registry refuses two collectors of one descriptor.
func retainedDesc(source string) *prometheus.Desc {
	return prometheus.NewDesc("leasewatch_postgres_slot_retained_wal_bytes",
		"Bytes of WAL the source's replication slot keeps the server from recycling, read every 10 s while the stream runs.",
		nil, prometheus.Labels{"source": source})
}

// slotMetrics is what the collector last read of its slot: the retained
// WAL in bytes, or -1 when it has no slot (never read, or dropped).
type slotMetrics struct {
	desc     *prometheus.Desc
	retained atomic.Int64
}

// retainedEvery is how often a streaming source reads its slot's retained
// WAL.
const retainedEvery = 10 * time.Second

var _ prometheus.Collector = (*Collector)(nil)

// Describe is prometheus.Collector's: the Runner registers a collector
// that is one.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.slot.desc }

// Collect reports the slot's retained WAL as last read, and nothing for a
// source with no slot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if n := c.slot.retained.Load(); n >= 0 {
		ch <- prometheus.MustNewConstMetric(c.slot.desc, prometheus.GaugeValue, float64(n))
	}
}

// watchSlot reads the slot's retained WAL now and every retainedEvery,
// on a connection of its own, until the returned stop is called.
func (c *Collector) watchSlot(ctx context.Context, cc *pgx.ConnConfig) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conn *pgx.Conn
		defer func() { hangUp(conn) }()
		for {
			if conn == nil {
				conn, _ = pgx.ConnectConfig(ctx, cc.Copy())
			}
			if conn != nil {
				rctx, rcancel := context.WithTimeout(ctx, c.deadline)
				n, ok, err := RetainedWAL(rctx, conn, c.cfg.Name)
				rcancel()
				switch {
				case err != nil:
					hangUp(conn)
					conn = nil
				case ok:
					c.slot.retained.Store(n)
				default:
					c.slot.retained.Store(-1)
				}
			}
			if !collectors.Sleep(ctx, retainedEvery) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
