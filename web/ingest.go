package web

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
)

// Ingest limits.
const (
	maxIngestBody   = 1 << 20       // bytes of one POST /api/v1/writes body
	maxIngestString = audit.MaxText // characters of any string field
	maxRequestID    = 200           // characters of request_id
)

// hashToken fixes every token's length, so comparing one does not reveal how
// long the configured tokens are.
func hashToken(t string) [32]byte { return sha256.Sum256([]byte(t)) }

// authorized reports whether the Authorization header carries one of the
// ingest tokens. It compares against every token in constant time.
func (s *Server) authorized(header string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return false
	}
	h := hashToken(tok)
	match := 0
	for _, want := range s.tokens {
		match |= subtle.ConstantTimeCompare(h[:], want[:])
	}
	return match == 1
}

// handleIngest takes write reports from protected resources. It validates the
// whole request before recording any of it, and answers 202 only once the
// reports are durable.
func (s *Server) handleIngest(c echo.Context) error {
	body, err := s.ingestBody(c)
	if err != nil {
		return err
	}
	reports, err := decodeWrites(body, s.known, s.now().UTC())
	if err != nil {
		return err
	}
	if err := s.writes.ReportWrites(c.Request().Context(), reports); err != nil {
		return err
	}
	for _, r := range reports {
		s.metrics.writes.WithLabelValues(string(r.Outcome)).Inc()
	}
	return c.JSON(http.StatusAccepted, map[string]int{"accepted": len(reports)})
}

// ingestBody checks what every ingest request must be (authorized, taken,
// uncompressed, within the body limit) and reads its body.
func (s *Server) ingestBody(c echo.Context) ([]byte, error) {
	req := c.Request()
	if !s.authorized(req.Header.Get(echo.HeaderAuthorization)) {
		return nil, audit.Errorf(audit.EUNAUTHORIZED, "missing or invalid bearer token")
	}
	if s.writes == nil {
		return nil, audit.Errorf(audit.EUNAVAILABLE, "ingest is not available")
	}
	if err := identityEncoding(c); err != nil {
		return nil, err
	}
	if err := jsonContent(c); err != nil {
		return nil, err
	}
	if req.ContentLength > maxIngestBody {
		return nil, audit.Errorf(audit.ETOOLARGE, "request body too large: over %d bytes", maxIngestBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response().Writer, req.Body, maxIngestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, audit.Errorf(audit.ETOOLARGE, "request body too large: over %d bytes", maxIngestBody)
		}
		return nil, audit.Errorf(audit.EINVALID, "body: could not be read")
	}
	return body, nil
}

// identityEncoding refuses a body sent with a content coding (gzip, br, ...):
// ingest reads bodies as they are, so a compressed one is neither misread as
// JSON nor inflated past the body limit.
func identityEncoding(c echo.Context) error {
	for _, v := range c.Request().Header.Values(echo.HeaderContentEncoding) {
		for _, coding := range strings.Split(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				c.Response().Header().Set(echo.HeaderAcceptEncoding, "identity") // RFC 9110 §15.5.16
				return audit.Errorf(audit.EUNSUPPORTED, "Content-Encoding: %s is not supported; send the body uncompressed",
					strconv.Quote(truncate(coding, 64)))
			}
		}
	}
	return nil
}

// jsonContent refuses a body whose Content-Type is not application/json: a
// form, text or a missing type says the sender meant something other than
// a JSON report, and ingest does not guess. JSON defines no parameters (RFC
// 8259 §11), so any given are ignored: the body is read as UTF-8 whatever
// charset says, and refused if it is not.
func jsonContent(c echo.Context) error {
	types := c.Request().Header.Values(echo.HeaderContentType)
	if len(types) == 1 {
		if mt, _, err := mime.ParseMediaType(types[0]); err == nil && mt == echo.MIMEApplicationJSON {
			return nil
		}
	}
	got := "missing"
	if len(types) > 0 {
		got = strconv.Quote(truncate(strings.Join(types, ", "), 64))
	}
	return audit.Errorf(audit.EUNSUPPORTED, "Content-Type: %s is not supported; send Content-Type: application/json", got)
}

// decodeBatch decodes a body of one object or an array of them, each with
// one. It fails with EINVALID naming the first bad field, "outcome: ..." for
// a single object and "writes[2].outcome: ..." in an array (plural names the
// array, what one object).
func decodeBatch[T any](body []byte, what, plural string, one func(raw []byte, at string) (T, error)) ([]T, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil, audit.Errorf(audit.EINVALID, "body: empty; want a %s object or an array of them", what)
	}
	if !json.Valid(body) {
		return nil, audit.Errorf(audit.EINVALID, "body: invalid JSON%s", syntaxOffset(body))
	}
	switch body[0] {
	case '{':
		r, err := one(body, "")
		if err != nil {
			return nil, err
		}
		return []T{r}, nil
	case '[':
		var raws []json.RawMessage
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, audit.Errorf(audit.EINVALID, "body: invalid JSON")
		}
		if len(raws) == 0 {
			return nil, audit.Errorf(audit.EINVALID, "%s: empty array; want at least one %s", plural, what)
		}
		out := make([]T, 0, len(raws))
		for i, raw := range raws {
			r, err := one(raw, fmt.Sprintf("%s[%d]", plural, i))
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	default:
		return nil, audit.Errorf(audit.EINVALID, "body: want a %s object or an array of them", what)
	}
}

// decodeWrites decodes a body of one write report or an array of them.
// at defaults to now.
func decodeWrites(body []byte, known map[string]audit.SourceKind, now time.Time) ([]audit.WriteReport, error) {
	return decodeBatch(body, "write report", "writes", func(raw []byte, at string) (audit.WriteReport, error) {
		return decodeWrite(raw, at, known, now)
	})
}

// syntaxOffset says where body stops being JSON, to help the sender.
func syntaxOffset(body []byte) string {
	var v any
	var se *json.SyntaxError
	if err := json.Unmarshal(body, &v); errors.As(err, &se) {
		return fmt.Sprintf(" at byte %d", se.Offset)
	}
	return ""
}

// badField makes the EINVALID error of one field of an object.
type badField func(key, format string, args ...any) error

// decodeObject walks one object's fields in document order, refusing
// duplicate fields and invalid JSON, and gives each field to field, which
// says whether it knows the key and what is wrong with the value. at names
// the object in messages ("" for a lone object), what says what it must be.
// It returns the object's badField for the checks made after every field is
// read.
func decodeObject(raw []byte, at, what string, field func(key string, val json.RawMessage) (known bool, err error)) (badField, error) {
	bad := func(key, format string, args ...any) error {
		if at != "" {
			key = at + "." + key
		}
		return audit.Errorf(audit.EINVALID, "%s: %s", key, fmt.Sprintf(format, args...))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		name := at
		if name == "" {
			name = "body"
		}
		return bad, audit.Errorf(audit.EINVALID, "%s: must be a %s object", name, what)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad, audit.Errorf(audit.EINVALID, "body: invalid JSON")
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return bad, audit.Errorf(audit.EINVALID, "body: invalid JSON")
		}
		name := displayKey(key)
		if seen[key] {
			return bad, bad(name, "duplicate field")
		}
		seen[key] = true
		switch known, err := field(key, val); {
		case !known:
			return bad, bad(name, "unknown field")
		case err != nil:
			return bad, bad(name, "%v", err)
		}
	}
	return bad, nil
}

// decodeWrite decodes one report object, checking its fields in document
// order: unknown and duplicate fields, JSON types, then values. at names the
// object in messages ("" for a lone object).
func decodeWrite(raw []byte, at string, known map[string]audit.SourceKind, now time.Time) (audit.WriteReport, error) {
	var w audit.WriteReport
	bad, err := decodeObject(raw, at, "write report", func(key string, val json.RawMessage) (ok bool, err error) {
		switch key {
		case "source":
			w.Source, err = jsonSource(val, known)
		case "lock":
			w.Lock, err = jsonString(val, maxIngestString)
		case "resource":
			w.Resource, err = jsonString(val, maxIngestString)
		case "holder":
			w.Holder, err = jsonString(val, maxIngestString)
		case "request_id":
			w.RequestID, err = jsonString(val, maxRequestID)
		case "outcome":
			w.Outcome, err = jsonOutcome(val)
		case "token":
			w.Token, err = jsonToken(val)
		case "highest_token":
			w.HighestToken, err = jsonToken(val)
		case "at":
			w.At, err = jsonReportTime(val, now)
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return w, err
	}
	if err := required(bad, "source", w.Source, "lock", w.Lock, "resource", w.Resource); err != nil {
		return w, err
	}
	switch {
	case w.Outcome == "":
		return w, bad("outcome", `required: "accepted" or "rejected"`)
	case w.Outcome == audit.WriteRejected && w.Token != nil && w.HighestToken != nil && *w.Token > *w.HighestToken:
		// Fencing rejects a token below the highest accepted, never above it.
		return w, bad("highest_token", "%d is below the rejected write's token %d; a resource rejects only tokens up to its highest",
			*w.HighestToken, *w.Token)
	}
	if w.At.IsZero() {
		w.At, w.AtDefaulted = now, true
	}
	return w, nil
}

// required fails with the first of keyValues' keys whose value is empty.
func required(bad badField, keyValues ...string) error {
	for i := 0; i+1 < len(keyValues); i += 2 {
		if keyValues[i+1] == "" {
			return bad(keyValues[i], "required")
		}
	}
	return nil
}

// jsonSource decodes an optional source name, which must be configured.
func jsonSource(val json.RawMessage, known map[string]audit.SourceKind) (string, error) {
	v, err := jsonString(val, maxIngestString)
	if err != nil || v == "" {
		return v, err
	}
	if _, ok := known[v]; !ok {
		return "", fmt.Errorf("unknown source %q", truncate(v, 64))
	}
	return v, nil
}

// jsonOutcome decodes an optional write outcome.
func jsonOutcome(val json.RawMessage) (audit.WriteOutcome, error) {
	v, err := jsonString(val, maxIngestString)
	if err != nil {
		return "", err
	}
	switch o := audit.WriteOutcome(v); o {
	case audit.WriteAccepted, audit.WriteRejected, "":
		return o, nil
	}
	return "", errors.New(`must be "accepted" or "rejected"`)
}

// jsonReportTime decodes an optional report time (zero when absent), which must
// be one leasewatch keeps and not far after now.
func jsonReportTime(val json.RawMessage, now time.Time) (time.Time, error) {
	v, err := jsonString(val, maxIngestString)
	if err != nil || v == "" {
		return time.Time{}, err
	}
	t, err := parseRFC3339(v)
	if err != nil {
		return time.Time{}, errors.New("must be an RFC 3339 time such as 2006-01-02T15:04:05.5Z")
	}
	if problem := reportTimeProblem(t, now); problem != "" {
		return time.Time{}, errors.New(problem)
	}
	return t.UTC(), nil
}

// displayKey makes an unknown key safe and short enough to echo in a message.
func displayKey(key string) string {
	if len(key) <= 64 && utf8.ValidString(key) && !strings.ContainsFunc(key, audit.Unprintable) && key != "" {
		return key
	}
	return strconv.Quote(truncate(strings.ToValidUTF8(key, "\uFFFD"), 64))
}

// jsonString decodes an optional string: null or absent is "". It must be valid
// UTF-8 without audit.Unprintable characters and at most max characters
// long. What collectors record never holds an Unprintable character (they
// escape it), so a name that does could name no recorded lock or holder: it
// is refused, not escaped, and the message says how it would be recorded.
func jsonString(val json.RawMessage, max int) (string, error) {
	if string(val) == "null" {
		return "", nil
	}
	if len(val) == 0 || val[0] != '"' {
		return "", errors.New("must be a string")
	}
	// encoding/json quietly turns invalid UTF-8 and lone surrogate escapes
	// into U+FFFD, so check the raw bytes and the escapes first.
	if !utf8.Valid(val) || loneSurrogate(val) {
		return "", errors.New("must be valid UTF-8")
	}
	var s string
	if err := json.Unmarshal(val, &s); err != nil {
		return "", errors.New("must be a string")
	}
	if i := strings.IndexFunc(s, audit.Unprintable); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return "", fmt.Errorf("must not contain control characters or bidirectional controls: %U at character %d (a collector records one escaped, as %s)",
			r, utf8.RuneCountInString(s[:i])+1, audit.Text(string(r)))
	}
	if utf8.RuneCountInString(s) > max {
		return "", fmt.Errorf("must be at most %d characters", max)
	}
	return s, nil
}

// loneSurrogate reports whether the JSON string literal val escapes one half
// of a UTF-16 surrogate pair without the other ("\udc00", "\ud800x"):
// text no UTF-8 string can hold.
func loneSurrogate(val []byte) bool {
	high := false // the escape just before was a pair's first half
	for i := 0; i < len(val); i++ {
		if val[i] != '\\' || i+1 >= len(val) || val[i+1] != 'u' || i+5 >= len(val) {
			if high {
				return true
			}
			if val[i] == '\\' {
				i++ // skip the escaped character: \\ is not the start of an escape
			}
			continue
		}
		n, err := strconv.ParseUint(string(val[i+2:i+6]), 16, 16)
		if err != nil {
			return true
		}
		i += 5
		switch r := rune(n); {
		case r >= 0xd800 && r < 0xdc00:
			if high {
				return true
			}
			high = true
		case r >= 0xdc00 && r < 0xe000:
			if !high {
				return true
			}
			high = false
		default:
			if high {
				return true
			}
		}
	}
	return high
}

// jsonToken decodes a fencing token: a non-negative integer or null. An
// integer is a number's value, as JSON Schema counts it, not its spelling:
// 42, 42.0, 4.2e1 and 420e-1 are all 42.
func jsonToken(val json.RawMessage) (*int64, error) {
	s := string(val)
	if s == "null" {
		return nil, nil
	}
	n, err := integerValue(s)
	switch {
	case errors.Is(err, errRange):
		return nil, errors.New("must fit in a signed 64-bit integer")
	case err != nil:
		return nil, errors.New("must be an integer or null")
	case n < 0:
		return nil, errors.New("must not be negative")
	}
	return &n, nil
}
