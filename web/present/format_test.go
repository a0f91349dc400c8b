package present

import (
	"net/url"
	"testing"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"worker-1":             "worker-1",
		"a\x1b[31mb":           "a\uFFFD[31mb",
		"nul\x00bel\x07":       "nul\uFFFDbel\uFFFD",
		"rtl\u202egnp.exe":     "rtl\uFFFDgnp.exe",
		"bad\xffutf8":          "bad\uFFFDutf8",
		"<script>é日本</script>": "<script>é日本</script>", // markup is templ's to escape
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWithQuery(t *testing.T) {
	q := url.Values{"a": {"1"}, "b": {"x y"}}
	if got := withQuery("/p", q, "b", "", "c", "<&>"); got != "/p?a=1&c=%3C%26%3E" {
		t.Errorf("withQuery = %q", got)
	}
	if q.Get("b") != "x y" {
		t.Errorf("withQuery changed its input")
	}
	if got := withQuery("/p", url.Values{}, "a", ""); got != "/p" {
		t.Errorf("withQuery without parameters = %q", got)
	}
}
