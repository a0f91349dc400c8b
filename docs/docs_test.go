// Package docs_test checks the documentation against the repository: every
// relative link of every Markdown file resolves, anchors included, and the
// configuration page names every key the configuration file accepts.
package docs_test

import (
	"bufio"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/backends"
)

// root is the repository, from this package's directory.
const root = ".."

// configurationPage is where every configuration key is documented.
const configurationPage = "configuration.md"

// TestRelativeLinksResolve fails, naming file:line, on each relative link of
// a Markdown file whose target does not exist, or whose #anchor names no
// heading of the Markdown file it points into.
func TestRelativeLinksResolve(t *testing.T) {
	docs := markdownFiles(t)
	if len(docs) < 10 {
		t.Fatalf("found %d Markdown files under %s: not the repository?", len(docs), root)
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) map[string]bool {
		if a, ok := anchorsOf[path]; ok {
			return a
		}
		anchorsOf[path] = headingAnchors(t, path)
		return anchorsOf[path]
	}
	checked := 0
	for _, doc := range docs {
		for _, l := range links(t, doc) {
			checked++
			if problem := checkLink(doc, l.target, anchors); problem != "" {
				t.Errorf("%s:%d: link %s: %s", rel(doc), l.line, l.target, problem)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked only %d relative links: is the link pattern still right?", checked)
	}
}

// checkLink returns what is wrong with target, a relative link in doc, or "".
func checkLink(doc, target string, anchors func(string) map[string]bool) string {
	path, anchor, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return "not a valid path: " + err.Error()
	}
	file := doc
	switch {
	case path == "":
	case strings.HasPrefix(path, "/"):
		file = filepath.Join(root, filepath.FromSlash(path))
	default:
		file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
	}
	if _, err := os.Stat(file); err != nil {
		return rel(file) + " does not exist"
	}
	if anchor != "" && strings.HasSuffix(file, ".md") && !anchors(file)[strings.ToLower(anchor)] {
		return rel(file) + " has no heading with the anchor #" + anchor
	}
	return ""
}

// markdownFiles returns every *.md file of the repository, leaving out
// hidden directories (.git, .cache: built tools), node_modules and testdata
// (the expected output of tests, not documentation).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// link is a relative link and the line it is on.
type link struct {
	target string
	line   int
}

var (
	// linkRE finds inline links and images: [text](target) and
	// [text](target "title").
	linkRE = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpanRE is an inline code span, whose brackets are no link.
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	// schemeRE starts an absolute URL (https:, mailto:).
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// links returns the relative links of the Markdown file path, outside code
// blocks and code spans.
func links(t *testing.T, path string) []link {
	t.Helper()
	var out []link
	eachProseLine(t, path, func(n int, line string) {
		line = codeSpanRE.ReplaceAllString(line, "``")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			if target := m[1]; !schemeRE.MatchString(target) {
				out = append(out, link{target: target, line: n})
			}
		}
	})
	return out
}

var (
	headingRE = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	htmlIDRE  = regexp.MustCompile(`<a\s[^>]*(?:name|id)="([^"]+)"`)
)

// headingAnchors returns the anchors GitHub gives the headings of the
// Markdown file path: each heading's slug, the second of a slug with -1
// appended, the third with -2; and the name or id of HTML anchors.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(t, path, func(_ int, line string) {
		for _, m := range htmlIDRE.FindAllStringSubmatch(line, -1) {
			out[strings.ToLower(m[1])] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	})
	return out
}

// slug is GitHub's anchor of a heading: lower case, every character but
// letters, digits, '-', '_' and spaces dropped, and each space a '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Is this lock safe? The verdict": "is-this-lock-safe-the-verdict",
		"`CI=true`":                      "citrue",
		"At a 65,000- and a 130,000-node cluster's rate (2026-12-07)": "at-a-65000--and-a-130000-node-clusters-rate-2026-12-07",
		"B. Kubernetes Lease (`coordination.k8s.io/v1`)":              "b-kubernetes-lease-coordinationk8siov1",
		"Alerts with replicas":                                        "alerts-with-replicas",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestLinksSkipCodeAndURLs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page.md")
	page := "See [a](a.md#x) and ![b](img/b.png \"B\").\n" +
		"`[not](code.md)` and [web](https://example.com) and [self](#here)\n" +
		"```md\n[fenced](fenced.md)\n```\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	got := links(t, path)
	want := []link{{"a.md#x", 1}, {"img/b.png", 1}, {"#here", 2}}
	if !slices.Equal(got, want) {
		t.Errorf("links = %v, want %v", got, want)
	}
}

// eachProseLine calls f with each line of the Markdown file path that is
// outside a fenced code block, and its number.
func eachProseLine(t *testing.T, path string, f func(n int, line string)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(nil, 1<<20)
	fence := ""
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
		case strings.HasPrefix(trimmed, "```"), strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		default:
			f(n, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestConfigurationPageNamesEveryKey fails on each key the configuration
// file accepts that docs/configuration.md does not name, as `key` written
// by its path: alerts.alertmanager.queue, sources[].endpoints.
func TestConfigurationPageNamesEveryKey(t *testing.T) {
	b, err := os.ReadFile(configurationPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	keys := configKeys()
	if len(keys) < 50 {
		t.Fatalf("found only %d configuration keys: is the walk of the config types still right?", len(keys))
	}
	for _, key := range keys {
		if !strings.Contains(page, "`"+key+"`") {
			t.Errorf("docs/%s does not name `%s`, a key the configuration accepts: add it, with its default and range", configurationPage, key)
		}
	}
}

// sectionType is a source's backend section, whose keys stand beside the
// source's own (collectors.Backend.Section).
var sectionType = reflect.TypeFor[collectors.Section]()

// configKeys returns every key the configuration file accepts, by its path,
// sorted: the yaml tags of config.Config, through nested structs, lists
// (sources[].name) and maps (NAME.*.key) of structs, and, beside a source's
// keys, the section keys of every backend leasewatch speaks.
func configKeys() []string {
	var keys []string
	walkKeys(reflect.TypeFor[config.Config](), "", &keys)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// walkKeys adds the keys of struct type t, each prefixed with prefix.
func walkKeys(t reflect.Type, prefix string, keys *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-" && f.Type == sectionType:
			for _, b := range backends.All() {
				walkKeys(reflect.TypeOf(b.Section()).Elem(), prefix, keys)
			}
			continue
		case name == "-":
			continue
		case slices.Contains(strings.Split(opts, ","), "inline"):
			walkKeys(deref(f.Type), prefix, keys)
			continue
		case name == "":
			name = strings.ToLower(f.Name) // yaml's default
		}
		key := prefix + name
		*keys = append(*keys, key)
		switch ft := deref(f.Type); ft.Kind() {
		case reflect.Struct:
			walkKeys(ft, key+".", keys)
		case reflect.Slice, reflect.Array:
			if e := deref(ft.Elem()); e.Kind() == reflect.Struct {
				walkKeys(e, key+"[].", keys)
			}
		case reflect.Map:
			if e := deref(ft.Elem()); e.Kind() == reflect.Struct {
				walkKeys(e, key+".*.", keys)
			}
		}
	}
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// rel names path from the repository's root.
func rel(path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return filepath.ToSlash(r)
	}
	return path
}
