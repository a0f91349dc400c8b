package audit

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxText is the most characters of a lock name, holder or resource that
// leasewatch records: what Text keeps of a backend's bytes, and what ingest
// takes.
const MaxText = 1024

// Unprintable reports whether r is a character leasewatch never records in
// a name, holder or resource: a control character (C0, DEL and C1), which a
// terminal or a log would act on, or a bidirectional control (U+061C,
// U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which would reorder the
// text around it on a page, so that a name reads as another.
//
// It is the one rule for every boundary such text crosses. A collector must
// record what its backend holds, so it escapes them (Text); a sender of
// write reports and beliefs names what was recorded, which never holds one,
// so ingest refuses them with a 400; pages replace any they still meet.
func Unprintable(r rune) bool {
	// Every bidirectional control is at or above U+061C: plain text needs
	// only the IsControl test.
	return unicode.IsControl(r) || r >= '\u061c' && unicode.Is(unicode.Bidi_Control, r)
}

// Text turns bytes a backend supplied (a key, a value, a hash field, a
// holder identity) into the text leasewatch records: valid UTF-8 without
// Unprintable characters, at most MaxText characters, and a different text
// for different bytes, so two keys never become one lock.
//
// A backslash becomes `\\`, and a byte that is not part of valid UTF-8, or
// that belongs to an Unprintable character (U+202E, U+2066, ...), becomes
// `\xHH`. Text without any is kept as it is. Within MaxText the escape is
// reversible, and pages show the text as it is, so the name a page shows is
// the name the lock is asked for by (`/review?lock=SOURCE/NAME`).
//
// Longer text is cut at a whole character or escape and ends in a mark that
// no escape produces, `\… (cut from N bytes, sha256 H)`, with the raw length
// and the first 128 bits of the raw bytes' SHA-256: two long keys that share
// their first thousand characters stay two locks.
func Text(raw string) string {
	if len(raw) <= MaxText && utf8.ValidString(raw) && !strings.ContainsFunc(raw, escaped) {
		return raw // nearly every name and holder: no copy
	}
	room := MaxText // characters the escaped text may take before the mark
	if len(raw) > MaxText/4 {
		// An escape writes at most four characters a byte, so fewer bytes
		// are never cut; more may be, and leave room for the mark.
		room -= utf8.RuneCountInString(cutMark(len(raw), ""))
	}
	var b strings.Builder
	n := 0       // characters written
	fits := true // everything so far is within room
	keep := 0    // b.Len() at the last piece within room
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRuneInString(raw[i:])
		piece := raw[i : i+size]
		switch {
		case r == '\\':
			piece = `\\`
		case r == utf8.RuneError && size == 1, escaped(r):
			piece = hexBytes(piece)
		}
		i += size
		n += utf8.RuneCountInString(piece)
		if n > MaxText {
			return b.String()[:keep] + cutMark(len(raw), raw)
		}
		b.WriteString(piece)
		if fits = fits && n <= room; fits {
			keep = b.Len()
		}
	}
	return b.String()
}

// escaped reports whether Text escapes r: the backslash, which starts its
// escapes, and the Unprintable characters.
func escaped(r rune) bool { return r == '\\' || Unprintable(r) }

// hexBytes writes each byte of s as `\xHH`.
func hexBytes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(`\x`)
		if s[i] < 0x10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.FormatUint(uint64(s[i]), 16))
	}
	return b.String()
}

// cutMark ends the cut text of n bytes raw. Its length depends on n only.
func cutMark(n int, raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return fmt.Sprintf(`\… (cut from %d bytes, sha256 %x)`, n, sum[:16])
}
