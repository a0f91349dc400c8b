package runcodec

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// heartbeats are n renewals of a lease renewed every interval plus up to
// jitter (uniform), its backend times to the microsecond, observed a few
// milliseconds later, each with the margin the tracker gives it.
func heartbeats(rng *rand.Rand, n int, interval, jitter, ttl time.Duration) []Renewal {
	rs := make([]Renewal, n)
	t := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC).UnixNano()
	prev := t - int64(interval)
	for i := range rs {
		t += int64(interval) + rng.Int64N(int64(jitter)+1)/1e3*1e3
		at := t + int64(time.Millisecond) + rng.Int64N(int64(4*time.Millisecond))
		ratio := float64(prev+int64(ttl)-t) / float64(ttl)
		margin := int64(math.Round(math.Round(ratio*1000) / 1000 * 1000))
		rs[i] = Renewal{At: at, RenewedAt: t, Margin: margin, TTL: ttl}
		prev = t
	}
	return rs
}

// kept is what a run gives back of rs: observed times to the millisecond.
func kept(rs []Renewal) []Renewal {
	out := make([]Renewal, len(rs))
	for i, r := range rs {
		r.At = floorMs(r.At) * 1e6
		out[i] = r
	}
	return out
}

// runOf is data, the run of rs, as its row keeps it.
func runOf(rs []Renewal, data []byte) Run {
	return Run{Renewals: len(rs), FirstAt: floorMs(rs[0].At) * 1e6, TTL: rs[0].TTL, Data: data}
}

// withTTL is rs, each renewal's lease ttl.
func withTTL(rs []Renewal, ttl time.Duration) []Renewal {
	out := append([]Renewal(nil), rs...)
	for i := range out {
		out[i].TTL = ttl
	}
	return out
}

func roundTrip(t *testing.T, rs []Renewal) []byte {
	t.Helper()
	data, err := Encode(rs)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	got, err := runOf(rs, data).Decode()
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if want := kept(rs); !reflect.DeepEqual(got, want) {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("renewal %d of %d = %+v, want %+v", i, len(want), got[i], want[i])
			}
		}
		t.Fatalf("decoded %d renewals, want %d", len(got), len(want))
	}
	return data
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	node := heartbeats(rng, MaxRenewals, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	cases := map[string]struct {
		ttl time.Duration
		rs  []Renewal
	}{
		"NodeLease":   {40 * time.Second, node},
		"OneRenewal":  {40 * time.Second, node[:1]},
		"LeaderLease": {15 * time.Second, heartbeats(rng, 1800, 2*time.Second, 0, 15*time.Second)},
		"NoBackendTime": {30 * time.Second, func() []Renewal {
			rs := heartbeats(rng, 200, 10*time.Second, 100*time.Millisecond, 30*time.Second)
			for i := range rs {
				rs[i].RenewedAt = audit.NoNanos
			}
			return rs
		}()},
		"MarginsMissingAndOff": {40 * time.Second, func() []Renewal {
			rs := heartbeats(rng, 300, 10*time.Second, 400*time.Millisecond, 40*time.Second)
			for i := range rs {
				switch i % 7 {
				case 0:
					rs[i].Margin = NoMargin
				case 3:
					rs[i].Margin = -rs[i].Margin * 1000
				}
			}
			return rs
		}()},
		"MissedHeartbeats": {40 * time.Second, func() []Renewal {
			rs := heartbeats(rng, 300, 10*time.Second, 400*time.Millisecond, 40*time.Second)
			for i := 50; i < len(rs); i++ {
				rs[i].RenewedAt += int64(35 * time.Second)
				rs[i].At += int64(35*time.Second) + 7e9
			}
			return rs
		}()},
		"DecimalPositions": {10 * time.Second, func() []Renewal {
			rs := heartbeats(rng, 100, 3*time.Second, time.Second, 10*time.Second)
			for i := range rs {
				rs[i].Position = []string{"7", "1234", "99", "-5", "9223372036854775807"}[i%5]
			}
			return rs
		}()},
		"HexPositions": {10 * time.Second, func() []Renewal {
			rs := heartbeats(rng, 100, 3*time.Second, time.Second, 10*time.Second)
			for i := range rs {
				rs[i].Position = "0x" + []string{"1a", "ff00", "0", "7fffffffffffffff"}[i%4]
			}
			return rs
		}()},
		"Extremes": {time.Millisecond, []Renewal{
			{At: lowestAt, RenewedAt: math.MaxInt64, Margin: math.MaxInt64},
			{At: math.MaxInt64, RenewedAt: audit.NoNanos + 1, Margin: NoMargin + 1},
			{At: 0, RenewedAt: -1, Margin: 0},
		}},
		"UnknownTTL": {0, heartbeats(rng, 50, time.Second, time.Millisecond, time.Second)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) { roundTrip(t, withTTL(c.rs, c.ttl)) })
	}
	// A lease that changes within the run: a Redis lock's PTTL read back
	// as its TTL or a millisecond more, then a holder that doubles it.
	t.Run("LeaseChanges", func(t *testing.T) {
		rs := heartbeats(rng, 300, 10*time.Second, 400*time.Millisecond, 30*time.Second)
		for i := range rs {
			rs[i].TTL += time.Duration(rng.IntN(2)) * time.Millisecond
			if i > 200 {
				rs[i].TTL = 60 * time.Second
			}
		}
		roundTrip(t, rs)
	})
}

// TestNodeLeaseSize holds the format to its reason for being: a node
// heartbeat (10 s, 4 % jitter, µs renewTime) in under three bytes, close
// to the 2.3 the jitter's information takes, and a leader lease's fixed
// interval in well under one.
func TestNodeLeaseSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		name             string
		interval, jitter time.Duration
		ttl              time.Duration
		most             float64
	}{
		{"NodeLease", 10 * time.Second, 400 * time.Millisecond, 40 * time.Second, 3},
		{"LeaderLease", 2 * time.Second, 0, 15 * time.Second, 1},
	} {
		rs := heartbeats(rng, 360, c.interval, c.jitter, c.ttl)
		data := roundTrip(t, rs)
		if per := float64(len(data)) / float64(len(rs)); per > c.most {
			t.Errorf("%s: %.2f bytes per renewal, want at most %.1f", c.name, per, c.most)
		}
	}
}

// TestRunKeepsNoAbsoluteTime: a run's first observed time is its row's
// (Run.FirstAt), so the same renewals a day apart make the same bytes.
func TestRunKeepsNoAbsoluteTime(t *testing.T) {
	rs := heartbeats(rand.New(rand.NewPCG(11, 12)), 360, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	later := make([]Renewal, len(rs))
	for i, r := range rs {
		r.At += int64(24 * time.Hour)
		r.RenewedAt += int64(24 * time.Hour)
		later[i] = r
	}
	a, b := roundTrip(t, rs), roundTrip(t, later)
	if !bytes.Equal(a, b) {
		t.Fatalf("a day later the run is other bytes (%d, was %d): it keeps an absolute time", len(b), len(a))
	}
}

// TestColumnTakesWhatTheJitterTakes: offsets spread over a range that is
// not a power of two take about its log2 bits each, not the next whole.
func TestColumnTakesWhatTheJitterTakes(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	vals := make([]int64, 4000)
	for i := range vals {
		vals[i] = 10_000_000 + rng.Int64N(400_001)
	}
	c := plan(vals)
	w := bitWriter{}
	for _, v := range vals {
		w.put(c, v)
	}
	if per := float64(len(w.buf)*8) / float64(len(vals)); per > 18.75 {
		t.Fatalf("%.2f bits a value, want at most 18.75 (log2 400,001 is 18.61)", per)
	}
	r := bitReader{buf: w.buf}
	for i, want := range vals {
		if got, err := r.get(c); err != nil || got != want {
			t.Fatalf("value %d = %d, %v; want %d", i, got, err, want)
		}
	}
}

// A lease read back a millisecond long half the time (a Redis lock's PTTL)
// costs the run about a bit a renewal, not a run of its own.
func TestLeaseFlipsCostABit(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	rs := heartbeats(rng, 360, 10*time.Second, 400*time.Millisecond, 30*time.Second)
	steady := len(roundTrip(t, rs))
	for i := range rs {
		rs[i].TTL += time.Duration(rng.IntN(2)) * time.Millisecond
		if i > 0 { // the margin the tracker gives it, against the lease before
			prev := rs[i-1]
			ratio := float64(prev.RenewedAt+int64(prev.TTL)-rs[i].RenewedAt) / float64(prev.TTL)
			rs[i].Margin = int64(math.Round(math.Round(ratio*1000) / 1000 * 1000))
		}
	}
	if flips := len(roundTrip(t, rs)); float64(flips-steady) > 0.2*float64(len(rs)) {
		t.Errorf("a flipping lease takes %d bytes more over %d renewals, want at most %.0f", flips-steady, len(rs), 0.2*float64(len(rs)))
	}
}

func TestEncodeRefuses(t *testing.T) {
	ok := Renewal{At: 1e18, RenewedAt: 1e18, Margin: 500}
	for name, rs := range map[string][]Renewal{
		"None":              nil,
		"TooMany":           make([]Renewal, MaxRenewals+1),
		"LeadingZero":       {{At: 1e18, RenewedAt: audit.NoNanos, Margin: NoMargin, Position: "007"}},
		"HexUpper":          {{At: 1e18, RenewedAt: audit.NoNanos, Margin: NoMargin, Position: "0xFF"}},
		"NotAnInteger":      {{At: 1e18, RenewedAt: audit.NoNanos, Margin: NoMargin, Position: "abc"}},
		"BackendTimeMixed":  {ok, {At: 2e18, RenewedAt: audit.NoNanos, Margin: 1}},
		"PositionFormMixed": {{At: 1e18, Position: "1"}, {At: 2e18, Position: "0x1"}},
		"AtOutOfRange":      {{At: audit.NoNanos + 1, RenewedAt: audit.NoNanos, Margin: NoMargin}},
		"LeaseNotWholeMs":   {{At: 1e18, RenewedAt: audit.NoNanos, Margin: NoMargin, TTL: time.Microsecond}},
		"LeaseNegative":     {{At: 1e18, RenewedAt: audit.NoNanos, Margin: NoMargin, TTL: -time.Second}},
	} {
		if _, err := Encode(rs); err == nil {
			t.Errorf("%s: encoded, want an error", name)
		}
	}
}

func TestDecodeRefusesDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rs := heartbeats(rng, 100, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	run := runOf(rs, roundTrip(t, rs))
	data := run.Data
	damaged := map[string]func(r *Run){
		"Empty":        func(r *Run) { r.Data = nil },
		"Version":      func(r *Run) { r.Data = append([]byte{2}, data[1:]...) },
		"Flags":        func(r *Run) { r.Data = append([]byte{Version, 7}, data[2:]...) },
		"Unit":         func(r *Run) { r.Data = append([]byte{Version, 1 | 4<<3}, data[2:]...) },
		"Truncated":    func(r *Run) { r.Data = data[:len(data)-3] },
		"TrailingByte": func(r *Run) { r.Data = append(bytes.Clone(data), 0) },
		"NoRenewals":   func(r *Run) { r.Renewals = 0 },
		"TooMany":      func(r *Run) { r.Renewals = MaxRenewals + 1 },
		"MoreThanHeld": func(r *Run) { r.Renewals++ },
		"FirstAtEarly": func(r *Run) { r.FirstAt = audit.NoNanos },
	}
	for name, damage := range damaged {
		r := run
		damage(&r)
		if _, err := r.Decode(); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

func TestPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	rs := heartbeats(rng, 1000, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	var staged []Staged
	for i, r := range rs {
		s := Staged{ID: int64(100 + i), Seq: 3, Renewal: r}
		s.TTL += time.Duration(i%2) * time.Millisecond // a lease read back a millisecond long keeps its run
		switch {
		case i == 10:
			s.Position = "not a position" // stays a row
		case i >= 900:
			s.Seq = 4 // the next tenure
		}
		staged = append(staged, s)
	}
	runs, sealed, err := Pack(9, staged)
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) != len(staged)-1 || sealed[10] != 111 {
		t.Fatalf("sealed %d ids (the 11th %d), want all but id 110", len(sealed), sealed[10])
	}
	var got []Renewal
	for i, run := range runs {
		if run.LockID != 9 || run.Renewals == 0 || run.FirstAt > run.LastAt {
			t.Fatalf("run %d = %+v", i, run)
		}
		if i > 0 && window(run.FirstAt) == window(runs[i-1].LastAt) && run.Seq == runs[i-1].Seq {
			t.Fatalf("runs %d and %d share a window and a tenure", i-1, i)
		}
		if window(run.FirstAt) != window(run.LastAt) {
			t.Fatalf("run %d spans windows %d to %d", i, window(run.FirstAt), window(run.LastAt))
		}
		dec, err := run.Decode()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, dec...)
	}
	// 999 renewals every 10 s are under three hours of two tenures: a run
	// per tenure and hour, whatever the millisecond the leases differ by.
	if len(runs) > 5 {
		t.Fatalf("%d runs of 999 renewals over 3 hours and 2 tenures, want at most 5", len(runs))
	}
	var fit []Renewal
	for i, s := range staged {
		if i != 10 {
			fit = append(fit, s.Renewal)
		}
	}
	want := kept(fit)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the runs hold %d renewals, not the %d staged that fit, in order", len(got), len(want))
	}
}

func TestEvents(t *testing.T) {
	rs := []Renewal{
		{At: 1_700_000_000_123_456_789, RenewedAt: 1_700_000_000_120_000_000, Margin: 750, TTL: 40 * time.Second},
		{At: 1_700_000_010_123_456_789, RenewedAt: audit.NoNanos, Margin: NoMargin, TTL: 41 * time.Second},
	}
	rs[1].RenewedAt = 1_700_000_010_120_000_000
	data, err := Encode(rs)
	if err != nil {
		t.Fatal(err)
	}
	run := Run{ID: 42, LockID: 7, Seq: 3, Renewals: 2, FirstAt: 1_700_000_000_123_000_000, TTL: 40 * time.Second, Detail: `{"key":"k"}`, Data: data}
	events, err := run.Events()
	if err != nil {
		t.Fatal(err)
	}
	e := events[0]
	if e.ID != ID(42, 0) || e.LockID != 7 || e.Seq != 3 || e.Kind != audit.EventRenew || e.TTL != 40*time.Second ||
		!e.At.Equal(time.Unix(0, 1_700_000_000_123_000_000)) {
		t.Fatalf("event 0 = %+v", e)
	}
	if e.Detail["key"] != "k" || e.Detail["margin_ratio"].(interface{ String() string }).String() != "0.75" ||
		e.Detail["renewed_at"] != "2023-11-14T22:13:20.12Z" {
		t.Fatalf("detail 0 = %v", e.Detail)
	}
	if events[1].TTL != 41*time.Second {
		t.Fatalf("event 1's lease = %v, want its own 41s", events[1].TTL)
	}
	if _, ok := events[1].Detail["margin_ratio"]; ok {
		t.Fatalf("detail 1 = %v, want no margin", events[1].Detail)
	}
	if run, index, ok := Split(events[1].ID); !ok || run != 42 || index != 1 {
		t.Fatalf("Split(%d) = %d, %d, %v", events[1].ID, run, index, ok)
	}
	if _, _, ok := Split(12345); ok {
		t.Fatal("a row's id split as a run's")
	}
}

func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(9, 10))
	rs := heartbeats(rng, 20, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	data, _ := Encode(rs)
	f.Add(data, int64(40*time.Second), len(rs), floorMs(rs[0].At)*1e6)
	f.Fuzz(func(t *testing.T, data []byte, ttl int64, n int, firstAt int64) {
		rs, err := Run{Data: data, TTL: time.Duration(ttl), Renewals: n, FirstAt: firstAt}.Decode()
		if err != nil {
			return
		}
		// What decodes encodes back to what decodes alike.
		again, err := Encode(rs)
		if err != nil {
			return // a damaged run can decode to renewals no run holds
		}
		rs2, err := runOf(rs, again).Decode()
		if err != nil || !reflect.DeepEqual(rs, rs2) {
			t.Fatalf("re-encoded run decodes to %v, %v; want %v", rs2, err, rs)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	rs := heartbeats(rand.New(rand.NewPCG(1, 1)), 360, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	var size int
	for b.Loop() {
		data, err := Encode(rs)
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size)/float64(len(rs)), "B/renewal")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/renewal")
}

func BenchmarkDecode(b *testing.B) {
	rs := heartbeats(rand.New(rand.NewPCG(1, 1)), 360, 10*time.Second, 400*time.Millisecond, 40*time.Second)
	data, _ := Encode(rs)
	run := runOf(rs, data)
	for b.Loop() {
		if _, err := run.Decode(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/renewal")
}
