package views

import (
	"bytes"
	"context"
	"html"
	"strings"
	"testing"

	"github.com/a-h/templ"
)

const xss = "<script>alert(1)</script>"

func renderString(t *testing.T, c templ.Component) string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	return buf.String()
}

// Backend data is untrusted: every place it lands must escape it.
func TestBackendDataIsEscaped(t *testing.T) {
	row := LockRow{ID: 7, Source: xss, Name: xss, Class: "lock", State: "held", Holder: xss, Token: "1"}
	finding := FindingRow{ID: 1, LockID: 7, Lock: xss, Kind: "overlap", Severity: "critical",
		Summary: xss, Holders: xss, Resource: xss}
	pages := map[string]templ.Component{
		"Locks": Locks(LocksPage{Filter: LockFilter{Q: `"><script>alert(1)</script>`, Source: xss},
			Sources: []string{xss}, Locks: []LockRow{row}}),
		"Lock": Lock(LockPage{
			Lock:        LockSummary{ID: 7, Source: xss, Name: xss, Holder: xss, State: "held"},
			Tenures:     []TenureRow{{Seq: 1, Holder: xss, End: "held"}},
			Findings:    []FindingRow{finding},
			Events:      []EventRow{{ID: 1, Kind: "grant", Holder: xss, Position: xss, Resource: xss, Detail: []Field{{Key: xss, Value: xss}}}},
			EventFilter: EventFilter{From: xss},
		}),
		"Findings": Findings(FindingsPage{Filter: FindingFilter{Resource: xss, Lock: xss}, Findings: []FindingRow{finding}}),
		"Sources":  Sources(SourcesPage{Sources: []SourceRow{{Name: xss, Kind: "etcd", State: "down", Error: xss}}}),
		"Error":    Error(ErrorPage{Status: 404, Title: "Not Found", Message: xss}),
	}
	for name, c := range pages {
		t.Run(name, func(t *testing.T) {
			out := renderString(t, c)
			if strings.Contains(out, "<script") {
				t.Errorf("%s renders a raw script tag:\n%s", name, out)
			}
			if !strings.Contains(out, html.EscapeString(xss)) {
				t.Errorf("%s lacks the escaped text %q", name, html.EscapeString(xss))
			}
		})
	}
}

func TestEmptyValuesRenderAsDash(t *testing.T) {
	out := renderString(t, Locks(LocksPage{Locks: []LockRow{{ID: 1, Name: "a", State: "free"}}}))
	if !strings.Contains(out, `<td class="holder">—</td>`) {
		t.Errorf("empty holder does not render as a dash:\n%s", out)
	}
	if !strings.Contains(out, `<span class="none">—</span>`) {
		t.Errorf("zero time does not render as a dash:\n%s", out)
	}
}
