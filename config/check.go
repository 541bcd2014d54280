package config

import (
	"encoding"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checker walks a YAML node tree alongside the Go type it will decode
// into and records every structural problem: unknown or duplicate keys,
// wrong node kinds and scalars that do not decode. yaml.v3's own errors
// name Go types and lines; these name the configuration path, which is
// what an operator can act on.
type checker struct {
	budget   int
	problems []Problem
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// isLeafType reports whether t decodes from a single YAML scalar.
func isLeafType(t reflect.Type) bool {
	if t == durationType || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// yamlName returns the YAML key of a struct field ("" for skipped fields).
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return strings.ToLower(f.Name)
	}
	return name
}

// maxProblems caps the problems reported for one document; past it the
// file is more likely not a warden configuration at all.
const maxProblems = 50

func (c *checker) add(n *yaml.Node, path, format string, args ...any) {
	switch {
	case len(c.problems) < maxProblems:
		c.problems = append(c.problems, Problem{Path: path, Line: n.Line, Reason: fmt.Sprintf(format, args...)})
	case len(c.problems) == maxProblems:
		c.problems = append(c.problems, Problem{Path: "(document)", Reason: fmt.Sprintf("more than %d problems; stopped", maxProblems)})
	}
}

// spend charges one node against the budget and reports whether the walk
// may go on.
func (c *checker) spend(n *yaml.Node, path string) bool {
	c.budget--
	if c.budget == -1 {
		c.add(n, orTop(path), "document too large or too many alias expansions (limit %d nodes)", nodeBudget)
	}
	return c.budget >= 0 && len(c.problems) <= maxProblems
}

// check verifies that n can decode into a value of type t.
func (c *checker) check(n *yaml.Node, t reflect.Type, path string) {
	if !c.spend(n, path) {
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			c.add(n, path, "unresolved alias")
			return
		}
		// Following aliases cannot loop: each step descends into the Go
		// type, which is not recursive, and the budget bounds fan-out.
		c.check(n.Alias, t, path)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // null keeps the default (lists and maps become empty)
	}
	switch {
	case isLeafType(t):
		c.checkScalar(n, t, path)
	case t.Kind() == reflect.Struct:
		c.checkStruct(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			c.add(n, path, "expected a list, got %s", kindName(n))
			return
		}
		for i, e := range n.Content {
			if c.budget < 0 {
				return
			}
			c.check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case t.Kind() == reflect.Map:
		c.checkMap(n, t, path)
	default:
		c.add(n, path, "unsupported field type %s", t) // unreachable with this schema
	}
}

// checkStruct verifies a mapping against a struct's YAML keys.
func (c *checker) checkStruct(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		c.add(n, orTop(path), "expected a mapping of keys, got %s", kindName(n))
		return
	}
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			fields[name] = t.Field(i).Type
		}
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !c.spend(k, path) {
			return
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			c.checkMerge(v, t, path)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			c.add(k, orTop(path), "mapping keys must be plain names, got %s", kindName(k))
			continue
		}
		p := join(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			c.add(k, p, "duplicate key (first set on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		ft, ok := fields[k.Value]
		if !ok {
			c.add(k, p, "unknown key%s", suggest(k.Value, keys(fields)))
			continue
		}
		c.check(v, ft, p)
	}
}

// checkMerge verifies the value of a YAML merge key (<<: *anchor).
func (c *checker) checkMerge(v *yaml.Node, t reflect.Type, path string) {
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			c.check(e, t, path)
		}
		return
	}
	c.check(v, t, path)
}

// checkMap verifies a mapping of string keys to leaf values.
func (c *checker) checkMap(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		c.add(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !c.spend(k, path) {
			return
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			c.add(k, path, "keys must be plain strings, got %s", kindName(k))
			continue
		}
		p := join(path, k.Value)
		if seen[k.Value] {
			c.add(k, p, "duplicate key")
			continue
		}
		seen[k.Value] = true
		c.check(v, t.Elem(), p)
	}
}

// checkScalar verifies that n is a scalar that decodes into t.
func (c *checker) checkScalar(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		c.add(n, path, "expected %s, got %s", describe(t), kindName(n))
		return
	}
	if err := decodeScalar(n, t); err != nil {
		c.add(n, path, "%v", err)
	}
}

// decodeScalar decodes one scalar node into a new value of type t,
// stricter than yaml.v3 about numbers (no silent float truncation).
func decodeScalar(n *yaml.Node, t reflect.Type) error {
	switch {
	case t == durationType:
		// yaml.v3 decodes only strings into durations; say what it wants.
		if _, err := time.ParseDuration(n.Value); err != nil || n.ShortTag() != "!!str" {
			return fmt.Errorf("expected a duration such as \"30s\" or \"10m\" (got %s)", quoteValue(n))
		}
		return nil
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		v := reflect.New(t)
		return v.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value))
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.ShortTag() != "!!int" || reflect.New(t).Elem().OverflowInt(parseIntOr(n.Value)) {
			return fmt.Errorf("expected an integer (got %s)", quoteValue(n))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.ShortTag() != "!!int" || strings.HasPrefix(n.Value, "-") {
			return fmt.Errorf("expected a non-negative integer (got %s)", quoteValue(n))
		}
	case reflect.Float32, reflect.Float64:
		if tag := n.ShortTag(); tag != "!!int" && tag != "!!float" {
			return fmt.Errorf("expected a number (got %s)", quoteValue(n))
		}
	case reflect.Bool:
		if n.ShortTag() != "!!bool" {
			return fmt.Errorf("expected true or false (got %s)", quoteValue(n))
		}
	}
	// Let yaml.v3 do the conversion proper; this catches what the
	// checks above let through (for example integer overflow).
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		return fmt.Errorf("expected %s (got %s)", describe(t), quoteValue(n))
	}
	return nil
}

// parseIntOr parses a YAML integer, saturating on overflow so that
// OverflowInt reports it.
func parseIntOr(s string) int64 {
	s = strings.ReplaceAll(s, "_", "")
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		if strings.HasPrefix(s, "-") {
			return -1 << 63
		}
		return 1<<63 - 1
	}
	return v
}

// describe names what a leaf type expects, for error messages.
func describe(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration"
	case t == reflect.TypeFor[ByteSize]():
		return "a byte size"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "an integer"
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	default:
		return "the value " + quoteValue(n)
	}
}

// quoteValue renders a scalar for an error message, shortened.
func quoteValue(n *yaml.Node) string {
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	return strconv.Quote(v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "(top level)"
	}
	return path
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// suggest returns `; did you mean "x"?` for the closest candidate within
// a small edit distance, or "".
func suggest(got string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(got), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30 // not a typo of a short key; skip the work
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
