package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"github.com/leasewatch/leasewatch/audit"
)

// The lock page's leadership health panel, over the fixture's hour: worker-1
// was first seen (its tenure's length is unknown) and expired at 13 s;
// worker-2 took the lock 9m47s later and holds it. Two renewals of
// worker-2's, with 80% and 20% of the lease left, make the margins.
func TestLockPageHealthPanel(t *testing.T) {
	f := newFixture(t)
	key := f.orders.Key()
	renew := func(at time.Duration, margin float64) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: t0.Add(at), Holder: "worker-2", Token: audit.Int64(42),
			TTL: 10 * time.Second, Seq: 2, Detail: map[string]any{"margin_ratio": margin}}
	}
	if err := f.store.Apply(context.Background(), audit.Batch{Events: []audit.Event{renew(11*time.Minute, 0.8), renew(12*time.Minute, 0.2)}}); err != nil {
		t.Fatal(err)
	}
	window := url.Values{"from": {t0.Format(time.RFC3339Nano)}, "to": {now.Format(time.RFC3339Nano)}}
	body := f.page(t, "/locks/"+itoa(f.orders.ID)+"?"+window.Encode(), http.StatusOK)
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	charts := map[string]*goquery.Selection{}
	doc.Find("#health figure").Each(func(_ int, fig *goquery.Selection) {
		charts[strings.Fields(fig.Find("figcaption").Text())[0]] = fig
	})
	for _, tt := range []struct {
		chart, caption string
		bars           map[string]string // label → count, for the bars with samples
	}{
		{"Tenure", "0 samples", nil},
		{"Takeover", "1 sample · median 9m47s", map[string]string{"≥ 5m": "1"}},
		{"Renewal", "2 samples · median 80%", map[string]string{"10%–25%": "1", "≥ 75%": "1"}},
	} {
		fig, ok := charts[tt.chart]
		if !ok {
			t.Fatalf("no %s chart in the health panel; charts: %v", tt.chart, charts)
		}
		if caption := strings.Join(strings.Fields(fig.Find("figcaption").Text()), " "); !strings.Contains(caption, tt.caption) {
			t.Errorf("%s chart: caption %q, want %q", tt.chart, caption, tt.caption)
		}
		got := map[string]string{}
		fig.Find("tr").Each(func(_ int, tr *goquery.Selection) {
			if n := strings.TrimSpace(tr.Find("td.num").Text()); n != "0" {
				got[strings.TrimSpace(tr.Find("th").Text())] = n
			}
		})
		if len(got) != len(tt.bars) {
			t.Errorf("%s chart: bars with samples %v, want %v", tt.chart, got, tt.bars)
		}
		for label, n := range tt.bars {
			if got[label] != n {
				t.Errorf("%s chart: bar %q = %q, want %q (bars %v)", tt.chart, label, got[label], n, got)
			}
		}
	}
}
