package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasewatch/leasewatch/audit"
)

// busyWrites adds, to the recorded incident's /locks/orders, more writes than
// a timeline draws one by one: accepted writes with worker-2's token 42 every
// 10 ms from 4.6 s, and rejected late writes with worker-1's ended token 41
// every 100 ms from 6.2 s, each on one of resources resources. It returns how
// many accepted and rejected writes the orders lock has from base to 12 s.
func busyWrites(t *testing.T, in *incident, accepted, rejected, resources int) (int, int) {
	t.Helper()
	var reports []audit.WriteReport
	for i := range accepted {
		reports = append(reports, audit.WriteReport{Source: incidentOrders.Source, Lock: incidentOrders.Name,
			Resource: fmt.Sprintf("shard-%d", i%resources), Token: audit.Int64(42), Outcome: audit.WriteAccepted,
			Holder: "worker-2", At: in.at(4600*time.Millisecond + time.Duration(i)*10*time.Millisecond),
			RequestID: fmt.Sprintf("busy-accepted-%d", i)})
	}
	for i := range rejected {
		reports = append(reports, audit.WriteReport{Source: incidentOrders.Source, Lock: incidentOrders.Name,
			Resource: fmt.Sprintf("shard-%d", i%resources), Token: audit.Int64(41), Outcome: audit.WriteRejected,
			Holder: "worker-1", At: in.at(6200*time.Millisecond + time.Duration(i)*100*time.Millisecond),
			RequestID: fmt.Sprintf("busy-rejected-%d", i)})
	}
	if err := in.rec.ReportWrites(context.Background(), reports); err != nil {
		t.Fatalf("report writes: %v", err)
	}
	// recordIncident's own writes to the lock: five accepted (one of them
	// the unfenced late write with token 41) and one rejected.
	return accepted + 5, rejected + 1
}

// A lock with more writes in the window than the timeline draws one by one
// says exactly how many there are, draws them counted per stretch of time
// (the counts adding up to the totals), and still draws the unfenced write.
func TestLockPageCountsWritesItCannotDraw(t *testing.T) {
	in := recordIncident(t, time.Date(2026, 5, 2, 9, 0, 0, 0, time.UTC))
	accepted, rejected := busyWrites(t, in, 450, 30, 7)
	h := reviewServer(t, in, in.at(12*time.Second))
	orders := in.lock(t, incidentOrders)
	// marks checks the page's note and that its write marks, counted per
	// stretch of time, add up to the writes.
	marks := func(t *testing.T, body string) {
		t.Helper()
		note := fmt.Sprintf("%d writes in this window (%d accepted, %d rejected, 1 unfenced)", accepted+rejected, accepted, rejected)
		wantContains(t, "lock page", body, note, fmt.Sprintf("/api/v1/locks/%d/events?kind=write_accepted", orders.ID))
		doc := parseHTML(t, body)
		if got := doc.Find("svg.timeline desc").Text(); !strings.Contains(got, fmt.Sprintf("%d writes", accepted+rejected)) {
			t.Errorf("timeline summary %q does not count %d writes", got, accepted+rejected)
		}
		sum := map[string]int{}
		marks := 0
		count := regexp.MustCompile(`^(\d+) writes? (accepted|rejected)\n`)
		doc.Find("svg.timeline g.write").Each(func(_ int, g *goquery.Selection) {
			marks++
			title := g.Find("title").Text()
			if strings.Contains(g.AttrOr("class", ""), "unfenced") {
				sum["unfenced"]++
				return
			}
			m := count.FindStringSubmatch(title)
			if m == nil {
				t.Errorf("write mark title %q does not count its writes", title)
				return
			}
			n, _ := strconv.Atoi(m[1])
			sum[m[2]] += n
		})
		if sum["accepted"] != accepted || sum["rejected"] != rejected || sum["unfenced"] != 1 {
			t.Errorf("write marks count %v, want %d accepted, %d rejected and the 1 unfenced write", sum, accepted, rejected)
		}
		if marks >= accepted {
			t.Errorf("%d write marks for %d writes: want them counted per stretch of time", marks, accepted+rejected)
		}
	}
	_, body := getOK(t, h, "/locks/"+strconv.FormatInt(orders.ID, 10)+"?"+windowQuery(in.base, in.at(12*time.Second)), "text/html")
	marks(t, body)

	// Over a quarter of an hour, stretches of 10 s, the store counts them
	// per tick: the same writes, with the same totals.
	t.Run("LongWindowCountedInTicks", func(t *testing.T) {
		_, body := getOK(t, h, "/locks/"+strconv.FormatInt(orders.ID, 10)+"?"+windowQuery(in.at(12*time.Second-15*time.Minute), in.at(12*time.Second)), "text/html")
		marks(t, body)
	})

	t.Run("FewWritesDrawnOneByOne", func(t *testing.T) {
		_, body := getOK(t, h, "/locks/"+strconv.FormatInt(orders.ID, 10)+"?"+windowQuery(in.base, in.at(4500*time.Millisecond)), "text/html")
		wantNotContains(t, "lock page", body, "too many to draw one by one")
		if n := parseHTML(t, body).Find("svg.timeline g.write").Length(); n != 2 {
			t.Errorf("%d write marks before 4.5 s, want worker-1's 2 writes one by one", n)
		}
	})
}

// The review lists a page of a handover's writes and counts the rest exactly,
// agreeing with the JSON export, which has every write.
func TestReviewListsAPageOfWritesAndCountsTheRest(t *testing.T) {
	in := recordIncident(t, time.Date(2026, 5, 2, 9, 0, 0, 0, time.UTC))
	busyWrites(t, in, 450, 30, 7)
	h := reviewServer(t, in, in.at(time.Minute))
	q := windowQuery(in.base, in.at(time.Minute)) + "&lock=" + url.QueryEscape(incidentOrders.String())

	_, js := getOK(t, h, "/review.json?"+q, "application/json")
	var export struct {
		Locks []struct {
			Handovers []struct {
				Writes []struct {
					Outcome string `json:"outcome"`
					Verdict string `json:"verdict"`
				} `json:"writes"`
				Counts struct {
					Total, Accepted, Rejected, Stale, Unfenced int
				} `json:"write_counts"`
			} `json:"handovers"`
		} `json:"locks"`
	}
	if err := json.Unmarshal([]byte(js), &export); err != nil {
		t.Fatalf("review.json: %v", err)
	}
	if len(export.Locks) != 1 || len(export.Locks[0].Handovers) == 0 {
		t.Fatalf("review.json has %+v, want the orders lock's handovers", export.Locks)
	}
	_, body := getOK(t, h, "/review?"+q, "text/html")
	doc := parseHTML(t, body)
	articles := doc.Find("article.handover")
	if articles.Length() != len(export.Locks[0].Handovers) {
		t.Fatalf("page shows %d handovers, export %d", articles.Length(), len(export.Locks[0].Handovers))
	}
	busy := 0
	for i, hv := range export.Locks[0].Handovers {
		art := articles.Eq(i)
		rows := art.Find("table.writes tbody tr").Length()
		c := hv.Counts
		if len(hv.Writes) != min(c.Total, reviewExportWrites) {
			t.Errorf("handover %d: the export lists %d of its %d writes, want %d", i+1, len(hv.Writes), c.Total, min(c.Total, reviewExportWrites))
		}
		if c.Total <= reviewWriteRows {
			if rows != c.Total {
				t.Errorf("handover %d lists %d of its %d writes, want all", i+1, rows, c.Total)
			}
			continue
		}
		busy++
		if rows != reviewWriteRows {
			t.Errorf("handover %d lists %d writes, want %d", i+1, rows, reviewWriteRows)
		}
		// Every stale or unfenced write is listed before the ordinary ones.
		flagged := c.Stale + c.Unfenced
		if got := art.Find("table.writes .badge.sev-info, table.writes .badge.sev-critical").Length(); got != min(flagged, reviewWriteRows) {
			t.Errorf("handover %d lists %d stale or unfenced writes, want %d", i+1, got, min(flagged, reviewWriteRows))
		}
		more := art.Find("p.warn").Text()
		listedAcc := art.Find("table.writes tr.kind-write_accepted").Length()
		want := fmt.Sprintf("%d of %d writes are listed; %d more (%d accepted, %d rejected", reviewWriteRows, c.Total,
			c.Total-reviewWriteRows, c.Accepted-listedAcc, c.Rejected-(reviewWriteRows-listedAcc))
		if !strings.Contains(more, want) {
			t.Errorf("handover %d says %q, want %q", i+1, more, want)
		}
	}
	if busy == 0 {
		t.Fatalf("no handover has more than %d writes: the test does not cover the cap", reviewWriteRows)
	}
	// The narrative tells the first groups of late writes and counts the rest.
	wantContains(t, "review page", body, "more late writes (")
}

// At most reviewTurns reviews are built at a time: while every turn is taken,
// a review waits, and a person who gives up waiting gets nothing built; once
// a turn is free it is served.
func TestReviewsWaitTheirTurn(t *testing.T) {
	in := recordIncident(t, time.Date(2026, 5, 2, 9, 0, 0, 0, time.UTC))
	srv, err := New(Config{Store: in.rec.Fresh(in.store), KnownSources: incidentSources, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return in.at(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	turns := 0
	for srv.reviews.TryAcquire(1) {
		turns++
	}
	if turns != reviewTurns {
		t.Fatalf("%d reviews at once, want %d", turns, reviewTurns)
	}
	q := windowQuery(in.base, in.at(time.Minute))
	for _, path := range []string{"/review", "/review.md", "/review.json"} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // gave up waiting
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, path+"?"+q, nil)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if rec.Code != statusClientClosed {
			t.Errorf("GET %s while every turn is taken, then given up: %d, want %d", path, rec.Code, statusClientClosed)
		}
	}
	// A review that comes now waits, and is served once a turn is free.
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/review?"+q, nil))
		done <- rec
	}()
	for testutil.ToFloat64(srv.metrics.reviewsWaiting) != 1 {
		select {
		case rec := <-done:
			t.Fatalf("a review was served (%d) while every turn was taken", rec.Code)
		case <-time.After(time.Millisecond):
		}
	}
	srv.reviews.Release(1)
	if rec := <-done; rec.Code != http.StatusOK {
		t.Errorf("GET /review once a turn was free: %d: %s", rec.Code, rec.Body)
	}
	if n := testutil.ToFloat64(srv.metrics.reviewsWaiting); n != 0 {
		t.Errorf("%v reviews still waiting, want 0", n)
	}
	for _, path := range []string{"/review", "/review.md", "/review.json"} {
		res, body := get(t, srv.Handler(), path+"?"+q)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with a turn free: %d: %s", path, res.StatusCode, body)
		}
	}
}
