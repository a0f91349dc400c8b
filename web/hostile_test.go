package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/PuerkitoBio/goquery"

	"github.com/leasewatch/leasewatch/audit"
)

// Hostile request bodies beyond TestIngestInvalid's field-by-field cases:
// nesting, every wrong type for every field, odd keys and odd bytes. Each is
// a 400 naming the problem, and none stores anything.
func TestIngestHostileBodies(t *testing.T) {
	f := newFixture(t)
	const lock = "lock:hostile"
	obj := func(extra string) string {
		return `{"source":"cache","lock":"` + lock + `","resource":"r","outcome":"accepted"` + extra + `}`
	}
	type tc struct{ name, body, want string }
	tests := []tc{
		{"DeepArrays", strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), "body: invalid JSON"},
		{"DeepObjects", strings.Repeat(`{"a":`, 50_000) + "1" + strings.Repeat("}", 50_000), "body: invalid JSON"},
		{"DeepInField", obj(`,"holder":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000)), "holder: must be a string"},
		{"DeepElement", `[` + obj("") + `,` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `]`, "writes[1]: must be a write report object"},
		{"UnknownFieldMarkup", obj(`,"<script>alert(1)</script>":1`), "<script>alert(1)</script>: unknown field"},
		{"UnknownFieldControl", obj(`,"a\u0000b":1`), `"a\x00b": unknown field`},
		{"UnknownFieldInvalidUTF8", obj(",\"a\xffb\":1"), "unknown field"},
		{"UnknownFieldLong", obj(`,"` + strings.Repeat("k", 5000) + `":1`), "…\": unknown field"},
		{"EmptyKey", obj(`,"":1`), `"": unknown field`},
		{"InvalidUTF8OutsideStrings", obj("") + "\xff", "body: invalid JSON"},
		{"BOM", "\ufeff" + obj(""), "body: invalid JSON"},
		{"NUL", obj("") + "\x00", "body: invalid JSON"},
		{"DEL", obj(`,"holder":"a` + "\x7f" + `"`), "holder: must not contain control characters"},
		{"C1Control", obj(`,"holder":"a\u0085"`), "holder: must not contain control characters"},
		{"EscapedNUL", obj(`,"request_id":"r\u0000"`), "request_id: must not contain control characters"},
		{"HugeToken", obj(`,"token":` + strings.Repeat("9", 10_000)), "token: must fit in a signed 64-bit integer"},
		{"ExponentToken", obj(`,"highest_token":1e400`), "highest_token: must fit in a signed 64-bit integer"},
		{"ArrayOfArrays", `[[` + obj("") + `]]`, "writes[0]: must be a write report object"},
		{"NullBody", `null`, "body"},
		{"StringBody", `"` + obj("") + `"`, "body"},
		{"ObjectsThenGarbage", `[` + obj("") + `]]`, "body: invalid JSON"},
	}
	// Every field, every wrong JSON type, before the required fields.
	required := map[string]string{"source": `"cache"`, "lock": `"` + lock + `"`, "resource": `"r"`, "outcome": `"accepted"`}
	for _, field := range []string{"source", "lock", "resource", "holder", "outcome", "at", "request_id", "token", "highest_token"} {
		isToken := strings.HasSuffix(field, "token")
		for _, v := range []string{`true`, `{}`, `[]`, `["x"]`, `{"a":"b"}`, `1.5`, `-3`, `12`, `"12"`} {
			want := field + ": must be a string"
			switch {
			case isToken && v == `12`, !isToken && v == `"12"`:
				continue // the right type
			case isToken && v == `-3`:
				want = field + ": must not be negative"
			case isToken:
				want = field + ": must be an integer or null"
			}
			body := `{"` + field + `":` + v
			for _, k := range []string{"source", "lock", "resource", "outcome"} {
				if k != field {
					body += `,"` + k + `":` + required[k]
				}
			}
			tests = append(tests, tc{"WrongType/" + field + "=" + v, body + "}", want})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, m := f.post(t, tt.body, bearer)
			if res.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST = %d %v, want 400", res.StatusCode, m)
			}
			wantError(t, m, tt.want)
			if msg := m["error"].(string); !utf8.ValidString(msg) || len(msg) > 512 {
				t.Errorf("error message is not short, valid text: %q", msg)
			}
		})
	}
	if ev := f.writeEvents(t, "cache", lock); len(ev) != 0 {
		t.Fatalf("hostile requests stored %d events: %+v", len(ev), ev)
	}
}

// A body of the largest size the API takes is decoded whole, and refused
// whole for its last report; one byte more is refused unread. Storing a
// full 1 MiB array of reports takes seconds (tens under -race), so the normal
// run stores a thousand; LEASEWATCH_HOSTILE_FULL=1 stores them all.
func TestIngestHugeArrays(t *testing.T) {
	f := newFixture(t)
	// Every report has a request id of the same length, to find them all
	// in the store afterwards.
	item := func(i int) string {
		return fmt.Sprintf(`{"source":"cache","lock":"lock:huge","resource":"r","outcome":"rejected","token":1,"request_id":"h-%06d"}`, i)
	}
	n := (maxIngestBody - 2) / (len(item(0)) + 1)
	items := make([]string, n)
	ids := make([]string, n)
	for i := range items {
		items[i], ids[i] = item(i), fmt.Sprintf("h-%06d", i)
	}
	body := "[" + strings.Join(items, ",") + "]"

	t.Run("OverLimit", func(t *testing.T) {
		over := body[:len(body)-1] + strings.Repeat(" ", maxIngestBody-len(body)+1) + "]"
		res, m := f.post(t, over, bearer)
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("POST %d bytes = %d %v, want 413", len(over), res.StatusCode, m)
		}
		if ev := f.writeEvents(t, "cache", "lock:huge"); len(ev) != 0 {
			t.Fatalf("an oversize array stored %d events", len(ev))
		}
	})
	t.Run("EmptyObjects", func(t *testing.T) {
		empties := "[" + strings.Repeat("{},", maxIngestBody/3-1) + "{}]"
		res, m := f.post(t, empties, bearer)
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST %d empty objects = %d %v, want 400", maxIngestBody/3, res.StatusCode, m)
		}
		wantError(t, m, "writes[0].source: required")
	})
	t.Run("LastBad", func(t *testing.T) {
		bad := strings.TrimSuffix(body, items[n-1]+"]") + strings.Replace(items[n-1], "rejected", "maybe", 1) + "]"
		res, m := f.post(t, bad, bearer)
		if res.StatusCode != http.StatusBadRequest {
			t.Fatalf("POST = %d %v, want 400", res.StatusCode, m)
		}
		wantError(t, m, fmt.Sprintf("writes[%d].outcome", n-1))
		if ev := f.writeEvents(t, "cache", "lock:huge"); len(ev) != 0 {
			t.Fatalf("an array with a bad last report stored %d events", len(ev))
		}
	})
	t.Run("Stored", func(t *testing.T) {
		if os.Getenv("LEASEWATCH_HOSTILE_FULL") != "1" {
			n = 1000
			ids = ids[:n]
			body = "[" + strings.Join(items[:n], ",") + "]"
		}
		start := time.Now()
		res, m := f.post(t, body, bearer)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("POST %d reports in %d bytes = %d %v, want 202", n, len(body), res.StatusCode, m)
		}
		wantNumber(t, "accepted", m["accepted"], float64(n))
		known, err := f.store.StoredWrites(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(known) != n {
			t.Fatalf("stored %d of the %d reports", len(known), n)
		}
		t.Logf("%d reports (%d bytes) stored in %v", n, len(body), time.Since(start).Round(time.Millisecond))
	})
}

// Markup and control characters that a backend puts in lock names and
// holders, and a resource puts in resources, holders and request ids, come
// out as text on every page, in the timeline's SVG and in the incident
// review's exports. This follows them the whole way: collector input through
// the recorder, write reports through the API, pages and exports through
// the handlers; pages are checked with an HTML parser for any element or
// attribute the data could have made.
func TestHostileStringsFromIngestToPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	name := `/locks/"><svg onload=alert(1)></title><script>alert(1)</script>[x](javascript:alert(1))|` + "`*_\u202e"
	holderA := `<img src=x onerror=alert(1)>`
	holderB := `<a href="javascript:alert(1)">B</a>` + "\x1b[2J"
	resource := `<iframe src="javascript:alert(1)"></iframe>|# heading`
	writer := `<svg><script>alert(1)</script></svg>`
	requestID := `<b onmouseover=alert(1)>r</b>`
	key := audit.LockKey{Source: "prod-etcd", Name: name}
	base := now.Add(-10 * time.Minute)

	grant := func(holder string, token int64, at time.Time) {
		t.Helper()
		if err := f.rec.Record(ctx, audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: key, Kind: audit.EventGrant, At: at, Holder: holder, Token: audit.Int64(token), LeaseDuration: 10 * time.Second,
		}}}); err != nil {
			t.Fatalf("observe grant to %q: %v", holder, err)
		}
	}
	grant(holderA, 41, base)
	grant(holderB, 42, base.Add(4*time.Second)) // while A's lease runs: overlap
	writes := []audit.WriteReport{
		{Source: key.Source, Lock: name, Resource: resource, Token: audit.Int64(41), Outcome: audit.WriteRejected, Holder: writer,
			At: base.Add(5 * time.Second), RequestID: requestID},
		{Source: key.Source, Lock: name, Resource: resource + "2", Token: audit.Int64(41), Outcome: audit.WriteAccepted, Holder: writer,
			At: base.Add(6 * time.Second), RequestID: requestID + "2"},
	}
	// Ingest refuses the name's bidirectional override (collectors record
	// one escaped, so no recorded lock has it); a store an earlier version
	// wrote may hold such reports, which pages must show safely all the same.
	reports, _ := json.Marshal([]map[string]any{{"source": key.Source, "lock": name, "resource": resource, "token": 41,
		"outcome": "rejected", "holder": writer, "request_id": requestID}})
	if res, m := f.post(t, string(reports), bearer); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST a report naming a lock with U+202E = %d %v, want 400", res.StatusCode, m)
	}
	if err := f.rec.ReportWrites(ctx, writes); err != nil {
		t.Fatalf("record hostile reports: %v", err)
	}
	l, err := f.store.LockByKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	id := itoa(l.ID)
	win := windowQuery(base.Add(-time.Minute), base.Add(time.Minute))

	for _, target := range []string{
		"/", "/locks", "/locks?q=" + url.QueryEscape("svg"), "/locks/" + id, "/locks/" + id + "?" + win,
		"/findings", "/findings?lock=" + id, "/review?" + win, "/review?" + win + "&lock=" + id,
	} {
		body := f.page(t, target, http.StatusOK)
		noElementsFromData(t, target, body)
		// A bidirectional override would reorder the page's text around
		// it, a terminal escape the text of whoever saves the page.
		if i := strings.IndexAny(body, "\x1b\u202e"); i >= 0 {
			t.Errorf("%s shows a raw control character or bidirectional override: %q", target, body[max(0, i-60):min(len(body), i+20)])
		}
	}
	// The data is there, as text.
	lockPage := htmlDoc(t, "lock page", f.page(t, "/locks/"+id+"?"+win, http.StatusOK))
	for _, s := range []string{holderA, resource, writer} {
		if !strings.Contains(lockPage.Text(), s) {
			t.Errorf("lock page lacks %q as text", s)
		}
	}
	if !strings.Contains(lockPage.Find("svg.timeline").Text(), holderA) {
		t.Errorf("timeline lacks the holder %q as text", holderA)
	}
	reviewPage := htmlDoc(t, "review", f.page(t, "/review?"+win+"&lock="+id, http.StatusOK))
	if !strings.Contains(reviewPage.Find("article.handover").Text(), holderA) {
		t.Errorf("review handover lacks the holder %q as text", holderA)
	}

	t.Run("Markdown", func(t *testing.T) {
		res, md := f.do(t, http.MethodGet, "/review.md?"+win+"&lock="+id, nil)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /review.md = %d: %s", res.StatusCode, md)
		}
		// Markdown renderers pass raw HTML through: parsed as HTML, the
		// export must be text only.
		noElementsInMarkdown(t, string(md))
		if strings.Contains(string(md), "](javascript:") {
			t.Errorf("Markdown export has a javascript: link:\n%s", md)
		}
		if strings.ContainsAny(string(md), "\x1b\u202e") {
			t.Errorf("Markdown export carries control characters:\n%q", md)
		}
	})
	t.Run("JSON", func(t *testing.T) {
		res, body := f.do(t, http.MethodGet, "/review.json?"+win+"&lock="+id, nil)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("GET /review.json = %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("review JSON does not decode: %v", err)
		}
		// JSON carries the data exactly; the encoder escapes < and > so
		// that a browser sniffing it finds no markup.
		if !jsonHasString(v, holderA) || strings.Contains(string(body), "<img") {
			t.Errorf("review JSON lacks the holder %q exactly, or carries it as raw markup", holderA)
		}
	})
	t.Run("EventsAPI", func(t *testing.T) {
		events := list(t, f.getJSON(t, "/api/v1/locks/"+id+"/events", http.StatusOK), "events")
		found := false
		for _, e := range events {
			if e["request_id"] == requestID && e["resource"] == resource && e["holder"] == writer {
				found = true
			}
		}
		if !found {
			t.Errorf("events API lacks the write with request id %q exactly: %v", requestID, events)
		}
	})
}

// noElementsFromData fails if a page holds an element or attribute that only
// data could have put there: an img, iframe, object or embed, a script
// that is not one of the layout's own files, an event handler attribute, or
// a javascript: URL. The page is parsed as a browser would (x/net/html,
// under goquery).
func noElementsFromData(t *testing.T, what, page string) {
	t.Helper()
	doc := htmlDoc(t, what, page)
	doc.Find("*").Each(func(_ int, s *goquery.Selection) {
		name := goquery.NodeName(s)
		switch name {
		case "img", "iframe", "object", "embed":
			t.Errorf("%s: a <%s> element from data", what, name)
		case "script":
			if src := s.AttrOr("src", ""); !strings.HasPrefix(src, "/static/") || s.Nodes[0].FirstChild != nil {
				t.Errorf("%s: a script that is not the layout's own (src %q)", what, src)
			}
		}
		for _, a := range s.Nodes[0].Attr {
			k := strings.ToLower(a.Key)
			v := strings.ToLower(strings.TrimSpace(a.Val))
			if strings.HasPrefix(k, "on") {
				t.Errorf("%s: <%s %s=%q>: an event handler from data", what, name, a.Key, a.Val)
			}
			if (k == "href" || k == "src" || k == "xlink:href" || k == "action") && strings.HasPrefix(v, "javascript:") {
				t.Errorf("%s: <%s %s=%q>: a javascript: URL", what, name, a.Key, a.Val)
			}
		}
	})
}

// noElementsInMarkdown fails if Markdown, read as HTML, has any element.
func noElementsInMarkdown(t *testing.T, md string) {
	t.Helper()
	htmlDoc(t, "Markdown export", md).Find("*").Each(func(_ int, s *goquery.Selection) {
		if name := goquery.NodeName(s); name != "html" && name != "head" && name != "body" {
			t.Errorf("Markdown export holds a <%s> element", name)
		}
	})
}

// jsonHasString reports whether s is one of the strings anywhere in v.
func jsonHasString(v any, s string) bool {
	switch v := v.(type) {
	case string:
		return v == s || strings.Contains(v, s)
	case []any:
		for _, e := range v {
			if jsonHasString(e, s) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if jsonHasString(e, s) {
				return true
			}
		}
	}
	return false
}

// serveTCP serves a fixture's server on a loopback port with timeouts for
// the test and returns its address; the server stops when the test ends.
func serveTCP(t *testing.T, timeouts Timeouts) string {
	t.Helper()
	f := newFixture(t, func(c *Config) { c.Timeouts = timeouts })
	return strings.TrimPrefix(serveReal(t, f.server), "http://")
}

// closedWithin reads from conn until the server closes it and returns how
// long that took and what the server sent; it fails if the server keeps the
// connection open for limit.
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) (time.Duration, string) {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(start.Add(limit))
	got, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v; got %q", limit, got)
	}
	return time.Since(start), string(got)
}

// Slow and stalled clients are cut off: one that sends its headers a byte at
// a time (slowloris) after the read-header timeout, one that trickles its
// body after the read timeout, and an idle keep-alive connection after the
// idle timeout.
func TestSlowClientsCutOff(t *testing.T) {
	const short = 400 * time.Millisecond
	addr := serveTCP(t, Timeouts{ReadHeader: short, Read: 3 * short, Idle: short})
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	// trickle writes s a byte every step until it is written or the
	// connection fails, and reports how many bytes went out.
	trickle := func(conn net.Conn, s string, step time.Duration) <-chan int {
		sent := make(chan int, 1)
		go func() {
			n := 0
			for ; n < len(s); n++ {
				if _, err := conn.Write([]byte{s[n]}); err != nil {
					break
				}
				time.Sleep(step) // the client's pace, not a wait for a condition
			}
			sent <- n
		}()
		return sent
	}

	t.Run("Slowloris", func(t *testing.T) {
		conn := dial(t)
		req := "GET /healthz HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Pad: a\r\n", 100) + "\r\n"
		sent := trickle(conn, req, 20*time.Millisecond) // the whole request would take 20 s
		took, got := closedWithin(t, conn, 5*time.Second)
		if took < short/2 {
			t.Errorf("closed after %v, before the read-header timeout %v", took, short)
		}
		if strings.Contains(got, "200 OK") {
			t.Errorf("a slowloris request was served: %q", got)
		}
		if n := <-sent; n >= len(req) {
			t.Errorf("the client sent all %d bytes: it was never cut off", n)
		}
	})
	t.Run("SlowBody", func(t *testing.T) {
		conn := dial(t)
		body := `{"source":"cache","lock":"lock:slow","resource":"r","outcome":"accepted"}`
		head := fmt.Sprintf("POST /api/v1/writes HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
			bearer, len(body))
		if _, err := conn.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		sent := trickle(conn, body, 100*time.Millisecond) // 7 s for the body
		took, got := closedWithin(t, conn, 15*time.Second)
		if took > 10*time.Second {
			t.Errorf("a trickled body held the connection %v", took)
		}
		if strings.Contains(got, "202 Accepted") {
			t.Errorf("a body slower than the read timeout was taken: %q", got)
		}
		<-sent
	})
	t.Run("IdleKeepAlive", func(t *testing.T) {
		conn := dial(t)
		if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(conn)
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("first request on the connection: %v", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Close {
			t.Fatalf("first request = %d, close %v: want 200 on a kept-alive connection", res.StatusCode, res.Close)
		}
		start := time.Now()
		conn.SetReadDeadline(start.Add(10 * time.Second))
		if _, err := r.ReadByte(); err == nil {
			t.Fatal("the server sent something on an idle connection")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the server kept an idle connection open for 10s")
		}
		if took := time.Since(start); took < short/2 {
			t.Errorf("idle connection closed after %v, before the idle timeout %v", took, short)
		}
	})
}

func TestTimeoutsDefaults(t *testing.T) {
	got := Timeouts{Read: time.Second}.withDefaults()
	want := Timeouts{ReadHeader: readHeaderTimeout, Read: time.Second, Write: writeTimeout, Idle: idleTimeout}
	if got != want {
		t.Fatalf("withDefaults = %+v, want %+v", got, want)
	}
}

// encoding/json turns a lone surrogate escape into U+FFFD without a word;
// ingest refuses it, wherever it stands, and takes proper pairs, escaped
// backslashes and a U+FFFD the sender wrote.
func TestDecodeWritesSurrogates(t *testing.T) {
	for _, tc := range []struct {
		holder string // as it stands in the JSON
		want   string // decoded; "" for an error
	}{
		{`\ud83d\ude00`, "\U0001F600"},
		{`\uD83D\uDE00x`, "\U0001F600x"},
		{`\\udc00`, `\udc00`},
		{`\\\ud83d\ude00`, "\\\U0001F600"},
		{`\ufffd`, "\uFFFD"},
		{"\uFFFD", "\uFFFD"},
		{`\udc00`, ""},
		{`\ud800`, ""},
		{`a\ud800b`, ""},
		{`\ud800\ufffd`, ""},
		{`\ud800\ud800\udc00`, ""},
		{`\ude00\ud83d`, ""},
		{`\\\udc00`, ""},
	} {
		body := `{"source":"cache","lock":"l","resource":"r","outcome":"accepted","holder":"` + tc.holder + `"}`
		got, err := decodeWrites([]byte(body), knownSources, now)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("holder %s decoded to %q, want an error", tc.holder, got[0].Holder)
		case tc.want == "" && !strings.Contains(err.Error(), "holder: must be valid UTF-8"):
			t.Errorf("holder %s: error %v, want holder: must be valid UTF-8", tc.holder, err)
		case tc.want != "" && err != nil:
			t.Errorf("holder %s: %v", tc.holder, err)
		case tc.want != "" && got[0].Holder != tc.want:
			t.Errorf("holder %s decoded to %q, want %q", tc.holder, got[0].Holder, tc.want)
		}
	}
}

// A body dripped past the read timeout is answered 408 with the API's JSON
// error, and the connection is closed, whichever ingest endpoint it was
// for. The write timeout is as short as the read timeout, as by default,
// so the answer is written after both have passed.
func TestDrippedBodyIs408(t *testing.T) {
	const short = 500 * time.Millisecond
	addr := serveTCP(t, Timeouts{ReadHeader: short, Read: short, Write: short})
	for _, path := range []string{"/api/v1/writes", "/api/v1/beliefs"} {
		t.Run(strings.TrimPrefix(path, "/api/v1/"), func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"source\":",
				path, bearer)
			if _, err := conn.Write([]byte(head)); err != nil {
				t.Fatal(err)
			}
			// The rest of the body never comes.
			_, got := closedWithin(t, conn, 10*time.Second)
			res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
			if err != nil {
				t.Fatalf("no HTTP answer to a dripped body: %v (%q)", err, got)
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusRequestTimeout {
				t.Errorf("status %s, want 408 Request Timeout (%q)", res.Status, got)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error, "timeout") {
				t.Errorf("body %q, want a JSON error about the timeout", body)
			}
			if !res.Close {
				t.Errorf("the answer does not close the connection: %q", got)
			}
		})
	}
}
