package audit

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Unprintable is exactly the control characters and the bidirectional
// controls, over every code point: the characters collectors escape and
// ingest refuses.
func TestUnprintable(t *testing.T) {
	var got []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if Unprintable(r) != (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)) {
			t.Fatalf("Unprintable(%U) = %v", r, Unprintable(r))
		}
		if Unprintable(r) && r > 0x9f {
			got = append(got, r)
		}
	}
	want := []rune{0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Unprintable above U+009F: %U, want %U", got, want)
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct{ name, raw, want string }{
		{"Plain", "lock:orders", "lock:orders"},
		{"Unicode", "verrou:café/łódź", "verrou:café/łódź"},
		{"BidiOverride", "txt\u202egnp", `txt\xe2\x80\xaegnp`},
		{"BidiIsolate", "\u2066x\u2069", `\xe2\x81\xa6x\xe2\x81\xa9`},
		{"BidiMarks", "a\u200fb\u061c", `a\xe2\x80\x8fb\xd8\x9c`},
		{"RightToLeftTextKept", "قفل/מנעול", "قفل/מנעול"},
		{"InvalidByte", "lock:\xff", `lock:\xff`},
		{"LiteralEscapeStaysDistinct", `lock:\xff`, `lock:\\xff`},
		{"Backslash", `a\b`, `a\\b`},
		{"Controls", "a\x00b\n\x7f", `a\x00b\x0a\x7f`},
		{"C1Control", "a\u0085", `a\xc2\x85`},
		{"TruncatedRune", "é"[:1] + "x", `\xc3x`},
		{"ReplacementCharKept", "a\uFFFD", "a\uFFFD"},
		{"Empty", "", ""},
		{"AtTheCap", strings.Repeat("x", MaxText), strings.Repeat("x", MaxText)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.raw); got != tc.want {
				t.Fatalf("Text(%q) = %q, want %q", tc.raw, got, tc.want)
			}
		})
	}

	t.Run("LongHolderCut", func(t *testing.T) {
		raw := strings.Repeat("h", 100_000)
		got := Text(raw)
		sum := sha256.Sum256([]byte(raw))
		mark := fmt.Sprintf(`\… (cut from 100000 bytes, sha256 %x)`, sum[:16])
		if !strings.HasSuffix(got, mark) {
			t.Fatalf("Text of 100,000 bytes ends %q, want the mark %q", got[max(0, len(got)-80):], mark)
		}
		if n := utf8.RuneCountInString(got); n != MaxText {
			t.Fatalf("Text of 100,000 bytes has %d characters, want %d", n, MaxText)
		}
		if !cut(got) {
			t.Fatalf("cut(%q) = false", got)
		}
	})

	t.Run("LongKeysSharingAPrefixStayDistinct", func(t *testing.T) {
		prefix := strings.Repeat("k", 2*MaxText)
		a, b := Text(prefix+"a"), Text(prefix+"b")
		if a == b {
			t.Fatalf("two keys that differ after %d bytes both became %q", len(prefix), a)
		}
	})

	t.Run("CutNeverSplitsAnEscape", func(t *testing.T) {
		for off := range 8 {
			raw := strings.Repeat("x", off) + strings.Repeat("\xff", MaxText)
			got := Text(raw)
			if _, ok := unescape(strings.TrimSuffix(got, got[strings.LastIndex(got, `\…`):])); !ok {
				t.Fatalf("cut text %q splits an escape", got)
			}
		}
	})
}

// FuzzText checks Text's promises on any bytes: its text is valid UTF-8
// without control characters, within MaxText, and either reads back as the
// raw bytes (so different bytes never share a text) or is cut, ending in the
// mark after a prefix that reads back as a prefix of the raw bytes.
func FuzzText(f *testing.F) {
	for _, s := range []string{
		"", "lock:orders", "lock:\xff", `lock:\xff`, `\\`, "\x00\n\x7f\u0085", "\xc3", "\xed\xa0\x80",
		"txt\u202egnp\u2066", strings.Repeat("\xff", MaxText), strings.Repeat("é", MaxText),
		strings.Repeat("a", MaxText+1), strings.Repeat(`\`, 600), strings.Repeat("x", 100_000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := Text(string(raw))
		if !utf8.ValidString(got) {
			t.Fatalf("Text(%q) = %q: not valid UTF-8", raw, got)
		}
		if strings.ContainsFunc(got, func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }) {
			t.Fatalf("Text(%q) = %q: has a control character or bidirectional control", raw, got)
		}
		if n := utf8.RuneCountInString(got); n > MaxText {
			t.Fatalf("Text(%q) has %d characters, over %d", raw, n, MaxText)
		}
		if !cut(got) {
			back, ok := unescape(got)
			if !ok || back != string(raw) {
				t.Fatalf("Text(%q) = %q reads back as %q (ok %v)", raw, got, back, ok)
			}
			return
		}
		i := strings.LastIndex(got, `\…`)
		sum := sha256.Sum256(raw)
		if mark := fmt.Sprintf(`\… (cut from %d bytes, sha256 %x)`, len(raw), sum[:16]); got[i:] != mark {
			t.Fatalf("Text(%d bytes) ends %q, want %q", len(raw), got[i:], mark)
		}
		back, ok := unescape(got[:i])
		if !ok || !strings.HasPrefix(string(raw), back) {
			t.Fatalf("Text(%q) kept %q, which reads back as %q (ok %v): not a prefix", raw, got[:i], back, ok)
		}
	})
}

// unescape reverses Text's escapes, reporting false on text Text cannot make.
func unescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], `\\`):
			b.WriteByte('\\')
			i++
		case strings.HasPrefix(s[i:], `\x`) && i+4 <= len(s):
			v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
			if err != nil || strings.ToLower(s[i+2:i+4]) != s[i+2:i+4] {
				return "", false
			}
			b.WriteByte(byte(v))
			i += 3
		default:
			return "", false
		}
	}
	return b.String(), true
}

// cut reports whether s, made by Text, ends in the cut mark: its first
// backslash that starts no escape starts the mark.
func cut(s string) bool {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '\\':
		case strings.HasPrefix(s[i:], `\\`):
			i++
		case strings.HasPrefix(s[i:], `\x`):
			i += 3
		default:
			return strings.HasPrefix(s[i:], `\… (cut from `)
		}
	}
	return false
}
