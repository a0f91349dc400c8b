package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestStreamKeepsUp: the stream reads on while a record waits for its
// commit (the recorder's commit interval, 400 ms), and merges what it reads
// meanwhile. Forty transactions written at once are recorded in fewer
// inputs than transactions, each change once and in order (one input a
// transaction took 16 s); and each input is dated on the database's clock,
// up to which the stream vouches it delivered every change, not on the
// collector's, which runs an hour ahead here.
func TestStreamKeepsUp(t *testing.T) {
	src := newTablesSource(t, "busy stream")
	cfg := src.cfg
	cfg.NoAdvisory, cfg.Tables = true, cfg.Tables[:1]
	sink := collectortest.NewSink(t, cfg.Name, Backend.Kind)
	c, err := New(cfg, collectortest.Logger(t, cfg.Name), WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	collectortest.Run(t, c, sink)

	var want []string
	for i := range 20 {
		holder := fmt.Sprintf("node-%02d", i)
		now := time.Now().UTC()
		src.exec(t, ShedLockAcquire, "busy", now.Add(time.Hour), now, holder)
		src.exec(t, ShedLockUnlock, "busy", now)
		want = append(want, "grant "+holder, "release "+holder)
	}
	events(t, sink, "shedlock/busy", want...)

	inputs := 0
	for _, in := range sink.Inputs() {
		if len(in.Observations) == 0 || in.Observations[0].Lock.Name != "shedlock/busy" {
			continue
		}
		inputs++
		if !in.Live || in.At.After(time.Now().Add(time.Minute)) {
			t.Errorf("input of %d observations: live %v at %s, want live at the database's time (collector's clock an hour ahead)",
				len(in.Observations), in.Live, in.At)
		}
	}
	if inputs >= 40 {
		t.Errorf("40 transactions recorded in %d inputs, want fewer: the stream waited for each record", inputs)
	}
	t.Logf("40 transactions recorded in %d inputs", inputs)
}
