package config

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkFields walks a configuration document along the types it decodes
// into, as yaml's decoder does, and returns each problem it finds, naming
// the field by its path: a value of the wrong type, an unknown key, a key
// given twice, and a zero written for a field tagged lw:"nonzero", whose
// zero value means "the default" (so that a Config built in code may leave
// it out), where the file would silently get the default instead.
//
// yaml's own messages carry only a line, and in flow style
// (auth: {mode: basic, users: [...]}) one line holds several fields, so a
// field found from the line would often be the wrong one. The path found
// by the walk is the same in any style.
func checkFields(doc *yaml.Node) []string {
	c := &fieldChecker{budget: maxCheckedNodes, zeros: true}
	c.value(doc, reflect.TypeFor[Config](), "")
	return c.problems
}

// maxCheckedNodes bounds the walk: aliases can make a short document a
// long walk (yaml's decoder has its own bound).
const maxCheckedNodes = 100_000

type fieldChecker struct {
	problems []string
	budget   int  // nodes left to visit
	zeros    bool // refuse explicit zeros of lw:"nonzero" fields
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// add records a problem with the value at path, from line. Where the field
// holds a secret, the characters of the value yaml quotes are hidden.
func (c *fieldChecker) add(path string, line int, msg string) {
	if secretField(path) {
		msg = quoteRE.ReplaceAllString(msg, "(value hidden)")
	}
	if path == "" {
		path = "the top level"
	}
	c.problems = append(c.problems, oneLine(fmt.Sprintf("%s (line %d): %s", path, line, msg)))
}

// oneLine makes msg one line of valid text: the start of a value yaml
// quotes may hold a line break, and may end inside a character.
func oneLine(msg string) string {
	return strings.ToValidUTF8(strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(msg), "\uFFFD")
}

// value checks n as a value of type t at path.
func (c *fieldChecker) value(n *yaml.Node, t reflect.Type, path string) {
	if c.budget--; c.budget < 0 {
		return
	}
	if isNull(n) {
		return // null leaves any value as it is
	}
	n = resolve(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == sharedKeysType && n.Kind == yaml.MappingNode {
		c.source(n, path)
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		c.leaf(n, t, path)
		return
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		c.mapping(n, path, func(k, v *yaml.Node, name string) {
			f, ok := structField(t, name)
			if !ok {
				c.add(join(path, name), k.Line, "unknown key; want one of "+strings.Join(structKeys(t), ", "))
				return
			}
			c.field(v, f, join(path, name))
		})
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		c.mapping(n, path, func(k, v *yaml.Node, name string) {
			c.leaf(k, t.Key(), join(path, name))
			c.value(v, t.Elem(), join(path, name))
		})
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			c.value(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		c.leaf(n, t, path)
	}
}

// field checks n as the value of struct field f at path.
func (c *fieldChecker) field(n *yaml.Node, f reflect.StructField, path string) {
	c.value(n, f.Type, path)
	if c.zeros && f.Tag.Get("lw") == "nonzero" {
		c.explicitZero(n, f.Type, path)
	}
}

// mapping calls visit for each key of mapping n the decoder takes, with
// the key's text: n's own keys, then those of merged mappings (<<) that n
// does not set itself. A key given twice is a problem, as for the decoder.
func (c *fieldChecker) mapping(n *yaml.Node, path string, visit func(k, v *yaml.Node, name string)) {
	taken := make(map[string]bool)
	var walk func(n *yaml.Node, merged bool)
	walk = func(n *yaml.Node, merged bool) {
		var merge *yaml.Node
		seen := make(map[string]int)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if isMergeKey(k) {
				merge = v // the decoder takes the last
				continue
			}
			if isNull(k) {
				continue // the decoder skips a null key
			}
			name := resolve(k).Value
			if line, dup := seen[name]; dup {
				c.add(join(path, name), k.Line, fmt.Sprintf("given twice (first at line %d)", line))
				continue
			}
			seen[name] = k.Line
			if merged && taken[name] {
				continue // set by the mapping that merges this one
			}
			taken[name] = true
			visit(k, v, name)
		}
		if merge == nil {
			return
		}
		merges := []*yaml.Node{merge}
		if m := resolve(merge); m != nil && m.Kind == yaml.SequenceNode {
			merges = m.Content
		}
		for _, m := range merges {
			if m = resolve(m); m == nil || m.Kind != yaml.MappingNode {
				c.add(path, merge.Line, "<< merges only a mapping or a list of mappings")
				return
			}
			if c.budget--; c.budget < 0 {
				return
			}
			walk(m, true)
		}
	}
	walk(n, false)
}

// leaf decodes n into a new value of type t, as the decoder would, and
// records what it refuses.
func (c *fieldChecker) leaf(n *yaml.Node, t reflect.Type, path string) {
	err := n.Decode(reflect.New(t).Interface())
	if err == nil {
		return
	}
	msgs := []string{err.Error()}
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	}
	for _, m := range msgs {
		c.add(path, n.Line, leadingLineRE.ReplaceAllString(m, ""))
	}
}

// explicitZero records a zero written for a key whose zero value means
// "the default": the file would silently get the default instead of what
// it says.
func (c *fieldChecker) explicitZero(n *yaml.Node, t reflect.Type, path string) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return
	}
	v := reflect.New(t)
	if n.Decode(v.Interface()) == nil && v.Elem().IsZero() {
		c.add(path, n.Line, fmt.Sprintf("%s would silently mean the default: leave the key out for the default, or give another value", n.Value))
	}
}

// plainKey is a key that join writes as it is.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// leadingLineRE is the "line N: " that starts yaml's messages.
var leadingLineRE = regexp.MustCompile(`^line \d+: `)

// resolve follows aliases and unwraps a document to its content; nil for
// an empty document or an alias to nothing.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		case n.Kind == yaml.DocumentNode:
			return nil
		default:
			return n
		}
	}
	return nil
}

// isNull reports whether n is null, or nothing, as the decoder takes it.
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// isMergeKey reports whether k is yaml's merge key, <<, as the decoder
// tells it.
func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// structField finds the field of struct type t that the key name sets.
func structField(t reflect.Type, name string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if f.IsExported() && yamlKey(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// structKeys are the keys of struct type t, sorted.
func structKeys(t reflect.Type) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		if k := yamlKey(f); f.IsExported() && k != "-" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// yamlKey is the key that sets field f, as yaml names it.
func yamlKey(f reflect.StructField) string {
	if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" {
		return k
	}
	return strings.ToLower(f.Name)
}

// join appends key to path, e.g. sources[0] and name to sources[0].name.
// A key other than letters, digits, '_' and '-' is quoted, as Validate
// quotes a user name: auth.users."a:b".
func join(path, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}
