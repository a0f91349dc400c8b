package web

import (
	"context"
	"net/http"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// The kept verdicts in the locks list (a column and a filter), the API's
// lock lists and the overview's counts: orders is kept unsafe; the hostile
// lock has not been judged yet.
func TestKeptVerdicts(t *testing.T) {
	f := newFixture(t)
	if err := f.store.PutVerdicts(context.Background(), []audit.LockVerdict{{LockID: f.orders.ID, Verdict: "unsafe", JudgedAt: now}}); err != nil {
		t.Fatal(err)
	}
	body := f.page(t, "/locks", http.StatusOK)
	wantContains(t, "/locks", body, `href="/locks/`+itoa(f.orders.ID)+`?verdict=24h#verdict"`, "✖ unsafe", `title="not judged yet"`)

	body = f.page(t, "/locks?verdict=unsafe", http.StatusOK)
	wantContains(t, "verdict=unsafe", body, "/locks/orders", `<option value="unsafe" selected>`)
	wantNotContains(t, "verdict=unsafe", body, escapedXSS)
	wantContains(t, "verdict=fenced", f.page(t, "/locks?verdict=fenced", http.StatusOK), "No locks match.")
	wantContains(t, "bad verdict", f.page(t, "/locks?verdict=safe", http.StatusBadRequest),
		`verdict: must be &#34;unsafe&#34;, &#34;unverified&#34;, &#34;fenced&#34;, &#34;efficiency&#34;`)

	locks := f.getJSON(t, "/api/v1/locks", http.StatusOK)["locks"].([]any)
	verdicts := map[string]any{}
	for _, l := range locks {
		m := l.(map[string]any)
		verdicts[m["name"].(string)] = m["verdict"]
	}
	if verdicts["/locks/orders"] != "unsafe" || verdicts[xss] != nil {
		t.Errorf("API verdicts = %v, want orders unsafe and the hostile lock without one", verdicts)
	}
	if got := f.getJSON(t, "/api/v1/locks?verdict=unsafe", http.StatusOK)["locks"].([]any); len(got) != 1 {
		t.Errorf("API locks of verdict unsafe = %v, want only orders", got)
	}
	if got := f.getJSON(t, "/api/v1/locks/"+itoa(f.orders.ID), http.StatusOK)["verdict"]; got != "unsafe" {
		t.Errorf("API lock verdict = %v, want unsafe", got)
	}
	f.getJSON(t, "/api/v1/locks?verdict=safe", http.StatusBadRequest)

	body = f.page(t, "/", http.StatusOK)
	wantContains(t, "overview", body, `href="/locks?verdict=unsafe"`, "✖ 1 unsafe", "? 0 unverified", "✔ 0 fenced")
}
