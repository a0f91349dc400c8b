package audit_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// FuzzRequestScope sends sequences of write reports drawn from a few locks,
// resources, request ids and contents through a recorder into a real store,
// and checks them against a model of request_id scope: the same id under
// another lock or resource is another write, stored; the same id in the same
// scope with the same content is a retry, acknowledged and stored once; with
// other content it is refused, with nothing of its request stored.
//
// Each two bytes are a report: the first picks lock, resource and request id
// and whether the report starts a new request; the second its outcome,
// holder, token and time.
func FuzzRequestScope(f *testing.F) {
	f.Add([]byte{0x00, 0x00, 0x00, 0x00})             // a retry in one request
	f.Add([]byte{0x00, 0x00, 0x12, 0x00})             // the same id at another resource, in another request
	f.Add([]byte{0x00, 0x00, 0x10, 0x01})             // a conflict in the next request
	f.Add([]byte{0x04, 0x00, 0x04, 0x02, 0x14, 0x00}) // a conflict inside one request, then a fresh request
	f.Add([]byte{0x00, 0x08, 0x10, 0x08, 0x10, 0x00}) // retries without at, then one with it
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64 {
			data = data[:64]
		}
		st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
		rec := storetest.StartRecorder(t, st)
		ctx := context.Background()
		if err := rec.Record(ctx, storetest.GrantInput("A", 41, at(0), "")); err != nil {
			t.Fatal(err)
		}

		type key struct{ lock, resource, id string }
		stored := make(map[key]audit.WriteReport) // the model: first report accepted per key
		var requests [][]audit.WriteReport
		for i := 0; i+1 < len(data); i += 2 {
			a, b := data[i], data[i+1]
			w := audit.WriteReport{
				Source:   "src",
				Lock:     []string{"orders", "carts"}[a&1],
				Resource: []string{"db-1", "db-2"}[a>>1&1],
				Outcome:  []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected}[b&1],
				Holder:   []string{"A", "B"}[b>>1&1],
				Token:    audit.Int64(40 + int64(b>>2&1)),
				At:       at(time.Duration(1+i) * time.Second),
			}
			if b&0x08 == 0 {
				w.At = at(time.Second)
			} else {
				w.AtDefaulted = true // At is the receipt time: i's
			}
			if w.Outcome == audit.WriteRejected {
				w.HighestToken = audit.Int64(41)
			}
			if id := a >> 2 & 3; id != 0 {
				w.RequestID = string(rune('0' + id))
			}
			if len(requests) == 0 || a&0x10 != 0 {
				requests = append(requests, nil)
			}
			requests[len(requests)-1] = append(requests[len(requests)-1], w)
		}

		same := func(w, prev audit.WriteReport) bool {
			return w.Outcome == prev.Outcome && w.Holder == prev.Holder && *w.Token == *prev.Token &&
				(w.HighestToken == nil) == (prev.HighestToken == nil) &&
				(w.HighestToken == nil || *w.HighestToken == *prev.HighestToken) &&
				(w.AtDefaulted || w.At.Equal(prev.At))
		}
		var unkeyed []audit.WriteReport // stored without a request id
		for n, req := range requests {
			mine := make(map[key]audit.WriteReport)
			conflict := false
			var keyless []audit.WriteReport
			for _, w := range req {
				if w.RequestID == "" {
					keyless = append(keyless, w)
					continue
				}
				k := key{w.Lock, w.Resource, w.RequestID}
				prev, ok := stored[k]
				if !ok {
					prev, ok = mine[k]
				}
				if ok && !same(w, prev) {
					conflict = true
				}
				if !ok {
					mine[k] = w
				}
			}
			err := rec.ReportWrites(ctx, req)
			if conflict {
				if audit.ErrorCode(err) != audit.ECONFLICT {
					t.Fatalf("request %d %+v: err = %v, want %s", n, req, err, audit.ECONFLICT)
				}
				continue
			}
			if err != nil {
				t.Fatalf("request %d %+v: %v", n, req, err)
			}
			for k, w := range mine {
				stored[k] = w
			}
			unkeyed = append(unkeyed, keyless...)
		}

		got := make(map[key][]audit.Event)
		keyless := 0
		for _, lock := range []string{"orders", "carts"} {
			for id, evs := range storetest.WritesByRequest(t, st, lock) {
				for _, e := range evs {
					if id == "" {
						keyless++
						continue
					}
					k := key{lock, e.Resource, id}
					got[k] = append(got[k], e)
				}
			}
		}
		if keyless != len(unkeyed) {
			t.Fatalf("stored %d writes without a request id, want %d", keyless, len(unkeyed))
		}
		if len(got) != len(stored) {
			t.Fatalf("stored writes under %d request keys, want %d: %v", len(got), len(stored), got)
		}
		for k, w := range stored {
			evs := got[k]
			if len(evs) != 1 {
				t.Fatalf("request %+v stored %d times, want once", k, len(evs))
			}
			e, _ := audit.WriteEventOf(evs[0])
			if e.Outcome != w.Outcome || e.Holder != w.Holder || e.Token == nil || *e.Token != *w.Token || !e.At.Equal(w.At) {
				t.Fatalf("request %+v stored as %+v, want the first report %+v", k, e, w)
			}
		}
	})
}
