package config

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL connection strings, in either of libpq's forms, which pgx
// parses too:
//
//	postgres://leasewatch@db.internal:5432/leasewatch?sslmode=verify-full
//	host=db.internal port=5432 user=leasewatch dbname=leasewatch sslmode=verify-full
//
// This file recognizes them (IsPostgres), reads the few keys the
// configuration checks, and hides their secrets wherever one may be shown:
// DatabaseShown for a string, HideSecrets for an error that may quote one.

// SecretKeys are the connection string keys whose values are secrets: those
// libpq shows as "*" (password, sslpassword; oauth_client_secret since
// PostgreSQL 18) and the SCRAM keys PostgreSQL 18 passes on
// (scram_client_key, scram_server_key). A URL's user-part password is one
// too, and so is whatever follows a # in a URL, which libpq does not treat
// as a fragment: it is most often the rest of a password that was not
// percent-encoded.
var SecretKeys = []string{"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}

// libpqKeywords are libpq's connection keywords (PQconndefaults of
// PostgreSQL 15 and the keys added up to 18) and pgx's own spelling of
// dbname: a database value with one of them followed by = is a keyword/value
// connection string, never a file name.
var libpqKeywords = []string{
	"service", "servicefile", "user", "password", "passfile", "channel_binding", "connect_timeout", "dbname", "database",
	"host", "hostaddr", "port", "client_encoding", "options", "application_name", "fallback_application_name",
	"keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "sslmode",
	"sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslcertmode", "sslpassword", "sslrootcert", "sslcrl",
	"sslcrldir", "sslsni", "sslkeylogfile", "requirepeer", "require_auth", "ssl_min_protocol_version",
	"ssl_max_protocol_version", "min_protocol_version", "max_protocol_version", "gssencmode", "gssdelegation",
	"krbsrvname", "gsslib", "replication", "target_session_attrs", "load_balance_hosts", "oauth_issuer",
	"oauth_client_id", "oauth_client_secret", "oauth_scope", "scram_client_key", "scram_server_key",
}

// redactedValue is what a secret is shown as.
const redactedValue = "xxxxx"

// urlScheme is a URL's scheme and its ://.
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// keywordValue is one key=value of libpq's keyword/value form: a key at the
// start or after white space, = with white space around it or not, and a
// value in single quotes (backslash escapes within; unterminated, to the
// end) or up to the next white space. It also finds the pairs of a string
// that does not parse as a whole, so that their secrets are hidden too.
var keywordValue = regexp.MustCompile(`(?s)(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*(?:'|\\?$)|(?:[^\s\\]|\\.)*)`)

// secretKeyValue finds the secret keys' values of a keyword/value string
// wherever one is written, within another key's value too: "host=
// password=x" gives the host "password=x", but its writer meant a password.
var secretKeyValue = regexp.MustCompile(`(?is)(?:^|[^a-z0-9_])(?:` + strings.Join(SecretKeys, "|") + `)\s*=\s*('(?:[^'\\]|\\.)*(?:'|\\?$)|(?:[^\s\\]|\\.)*)`)

// connParam is one key's value in a connection string.
type connParam struct {
	key        string // lower case
	value      string // percent-decoded (URL), or unquoted and unescaped (keyword/value)
	start, end int    // the raw text of the value in the string
}

func (p connParam) secret() bool { return slices.Contains(SecretKeys, p.key) }

// isURL reports whether database is a URL (of any scheme), and its scheme.
func isURL(database string) (string, bool) {
	m := urlScheme.FindStringSubmatch(database)
	if m == nil {
		return "", false
	}
	return strings.ToLower(m[1]), true
}

// IsPostgres reports whether database (a database: value, or a command's
// flag) names a PostgreSQL database, by a postgres:// or postgresql:// URL
// or in libpq's keyword/value form, rather than a SQLite file.
func IsPostgres(database string) bool {
	if scheme, ok := isURL(database); ok {
		return slices.Contains(postgresSchemes, scheme)
	}
	return slices.ContainsFunc(keywordParams(database), func(p connParam) bool {
		return slices.Contains(libpqKeywords, p.key)
	})
}

// connParams returns the keys of a PostgreSQL connection string as pgx
// reads them (a URL's user-part password as "password"), in order: where
// a key is given twice, the last counts.
func connParams(database string) []connParam {
	if _, ok := isURL(database); ok {
		return urlParams(database)
	}
	return keywordParams(database)
}

// connValue is the value of key in params, the last one given.
func connValue(params []connParam, key string) (string, bool) {
	for i := len(params) - 1; i >= 0; i-- {
		if params[i].key == key {
			return params[i].value, true
		}
	}
	return "", false
}

// keywordParams reads the key=value pairs of s.
func keywordParams(s string) []connParam {
	var params []connParam
	for _, m := range keywordValue.FindAllStringSubmatchIndex(s, -1) {
		raw := s[m[4]:m[5]]
		value := raw
		if strings.HasPrefix(value, "'") {
			value = strings.TrimSuffix(value[1:], "'")
		}
		params = append(params, connParam{key: strings.ToLower(s[m[2]:m[3]]), value: unescapeValue(value), start: m[4], end: m[5]})
	}
	return params
}

// unescapeValue applies libpq's backslash rule: a backslash is dropped and
// the character after it taken as it is.
func unescapeValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			if i++; i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// urlParams reads a URL as libpq does: the user part ends at the first @
// before any /, the query is &-separated key=value pairs, and a # is no
// delimiter.
func urlParams(s string) []connParam {
	off := len(urlScheme.FindString(s))
	rest := s[off:]
	var params []connParam
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, password, hasPassword := strings.Cut(rest[:i], ":")
		params = append(params, connParam{key: "user", value: percentDecoded(user), start: off, end: off + len(user)})
		if hasPassword {
			params = append(params, connParam{key: "password", value: percentDecoded(password), start: off + len(user) + 1, end: off + i})
		}
		off += i + 1
	}
	q := strings.IndexByte(s[off:], '?')
	if q < 0 {
		return params
	}
	at := off + q + 1
	for _, pair := range strings.Split(s[at:], "&") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			start := at + len(k) + 1
			params = append(params, connParam{key: strings.ToLower(percentDecoded(k)), value: percentDecoded(v), start: start, end: start + len(v)})
		}
		at += len(pair) + 1
	}
	return params
}

// percentDecoded is s with its %XX escapes decoded, or s as it is when one
// is malformed.
func percentDecoded(s string) string {
	if d, err := url.PathUnescape(s); err == nil {
		return d
	}
	return s
}

// secretSpans are the spans of database's text that DatabaseShown and
// HideSecrets hide: the values of SecretKeys, in a keyword/value string
// wherever they are written (secretKeyValue); in a URL besides, from the
// first : of the user part to the last @, in case a password holds a / or
// an @ that was not percent-encoded, and everything after a #.
func secretSpans(database string) [][2]int {
	var spans [][2]int
	for _, p := range connParams(database) {
		if p.secret() {
			spans = append(spans, [2]int{p.start, p.end})
		}
	}
	if _, ok := isURL(database); !ok {
		for _, m := range secretKeyValue.FindAllStringSubmatchIndex(database, -1) {
			spans = append(spans, [2]int{m[2], m[3]})
		}
	} else {
		off := len(urlScheme.FindString(database))
		rest := database[off:]
		userEnd := 0
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			userEnd = at + 1
			if c := strings.IndexByte(rest[:at], ':'); c >= 0 {
				spans = append(spans, [2]int{off + c + 1, off + at})
			}
		}
		if h := strings.IndexByte(rest[userEnd:], '#'); h >= 0 {
			spans = append(spans, [2]int{off + userEnd + h + 1, len(database)})
		}
	}
	return mergeSpans(spans)
}

// mergeSpans sorts spans and joins those that overlap or touch.
func mergeSpans(spans [][2]int) [][2]int {
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	var out [][2]int
	for _, s := range spans {
		if n := len(out); n > 0 && s[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], s[1])
			continue
		}
		out = append(out, s)
	}
	return out
}

// DatabaseShown is database as a message may show it: a SQLite path as it
// is; a PostgreSQL connection string with every secret (secretSpans)
// replaced by xxxxx, and a URL's scheme in lower case.
func DatabaseShown(database string) string {
	if !IsPostgres(database) {
		return database
	}
	var b strings.Builder
	last := 0
	if scheme, ok := isURL(database); ok {
		b.WriteString(scheme + "://")
		last = len(urlScheme.FindString(database))
	}
	for _, s := range secretSpans(database) {
		b.WriteString(database[last:s[0]])
		if s[1] > s[0] {
			b.WriteString(redactedValue)
		}
		last = s[1]
	}
	b.WriteString(database[last:])
	return b.String()
}

// secretTexts are the secrets of the connection strings, as written and as
// decoded, longest first, so that a message quoting any of them, whole or
// after pgx has read it, can have them replaced.
func secretTexts(databases []string) []string {
	var texts []string
	for _, d := range databases {
		if !IsPostgres(d) {
			continue
		}
		for _, s := range secretSpans(d) {
			texts = append(texts, d[s[0]:s[1]])
		}
		for _, p := range connParams(d) {
			if p.secret() {
				texts = append(texts, p.value)
			}
		}
	}
	for _, t := range slices.Clone(texts) {
		texts = append(texts, secretPieces(t)...)
	}
	texts = slices.DeleteFunc(texts, func(s string) bool { return s == "" })
	sort.Slice(texts, func(i, j int) bool { return len(texts[i]) > len(texts[j]) })
	return slices.Compact(texts)
}

// secretPieces are the parts of secret between the characters where a
// parser may have cut it (white space, quotes, backslashes, and a URL's
// delimiters), of at least minSecretPiece bytes: what is left of a secret
// that pgx's best-effort redaction masked only in part.
func secretPieces(secret string) []string {
	pieces := strings.FieldsFunc(secret, func(r rune) bool { return strings.ContainsRune(" \t\n\r\v\f'\"\\@/:#?&=%", r) })
	return slices.DeleteFunc(pieces, func(p string) bool { return len(p) < minSecretPiece || p == secret })
}

// minSecretPiece is the shortest piece of a secret hidden on its own: a
// shorter one tells little, and hiding it would garble the message.
const minSecretPiece = 3

// HideSecrets returns err with every secret of the connection strings
// databases hidden from its message (xxxxx in their place), whatever quoted
// them: pgx's own redaction of a string it could not parse is best effort.
// The error it wraps stays reachable by errors.Is and errors.As; nil stays
// nil.
func HideSecrets(err error, databases ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var parse *pgconn.ParseConfigError
	if errors.As(err, &parse) {
		// pgx quotes the string it could not parse with what its own
		// redaction left of it: quote it as DatabaseShown does instead.
		inner := parse.Error()
		if i := strings.LastIndex(inner, "`: "); i >= 0 {
			msg = strings.ReplaceAll(msg, inner, "cannot parse `"+DatabaseShown(parse.ConnString)+inner[i:])
		}
		databases = append(databases, parse.ConnString)
	}
	for _, s := range secretTexts(databases) {
		msg = strings.ReplaceAll(msg, s, redactedValue)
	}
	return &hiddenError{msg: msg, err: err}
}

// hiddenError is an error whose message has had secrets taken out.
type hiddenError struct {
	msg string
	err error
}

func (e *hiddenError) Error() string { return e.msg }
func (e *hiddenError) Unwrap() error { return e.err }
