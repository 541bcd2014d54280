package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Pieces of the JSON grammar (compact: no whitespace).
const (
	// strChar is one character of a JSON string: anything but a quote,
	// a backslash or a control character, or an escape. \u escapes of
	// surrogates are left out so every escape is one character (length
	// limits count characters).
	strChar   = `(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))`
	anyString = `"` + strChar + `*"`
	// boundedChar is one character of a string with a length bound:
	// written directly, or one of the short escapes. It is a quarter of
	// strChar's size, and a bounded string has one copy per character
	// (a maxLength of 1000 is 1000 copies).
	boundedChar = `(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])`
	// Numbers are bounded to 16 integer and 15 fraction digits and carry
	// no exponent, so they parse as finite float64 values everywhere.
	maxIntMag    = 9_999_999_999_999_999 // 16 digits
	numberRegex  = `-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,15})?`
	integerRegex = `-?(?:0|[1-9][0-9]{0,15})`
	fraction     = `\.[0-9]{1,15}`
	scalarRegex  = `(?:null|true|false|` + numberRegex + `|` + anyString + `)`
	// anyDepth bounds the nesting of objects and arrays inside an
	// unconstrained ("any JSON") value.
	anyDepth = 2
	// maxSchemaDepth bounds schema nesting (after $ref expansion).
	maxSchemaDepth = 32
	// maxRegexLen bounds the regular expression a schema expands to.
	maxRegexLen = 4 << 20
	// Bounds for counted repetitions (see repeat): larger maximums are
	// lowered (the output stays valid), larger minimums are refused.
	maxLengthBound = 1000
	maxItemsBound  = 64
)

// annotations are keywords that do not constrain the value.
var annotations = []string{"title", "description", "default", "examples", "$schema", "$id", "$comment",
	"deprecated", "readOnly", "writeOnly", "$defs", "definitions"}

// handled are the keywords this package enforces.
var handled = []string{"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
	"uniqueItems", "enum", "const", "anyOf", "$ref", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
	"minLength", "maxLength", "format"}

// formats maps the supported string formats to their grammar (a subset of
// each format: dates avoid February 29, times leap seconds).
var formats = map[string]string{
	"date":      dateRegex,
	"time":      timeRegex,
	"date-time": dateRegex + "T" + timeRegex,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
	"ipv4":      `(?:` + octet + `\.){3}` + octet,
}

const (
	dateRegex = `[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)`
	timeRegex = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	octet     = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
)

// SchemaRegex returns the regular expression (RE2 syntax) matching the
// compact JSON texts warden generates for schema. It refuses keywords it
// cannot enforce with an *UnsupportedError.
func SchemaRegex(schema []byte) (string, error) {
	if len(schema) > MaxSpecBytes {
		return "", fmt.Errorf("%w: schema is %d bytes, the limit is %d", ErrTooLarge, len(schema), MaxSpecBytes)
	}
	root, err := decodeOrdered(schema)
	if err != nil {
		return "", fmt.Errorf("%w: json_schema: %v", ErrInvalid, err)
	}
	c := &schemaCompiler{root: root}
	re, err := c.value(root, "", 0)
	if err != nil {
		return "", err
	}
	if len(re) > maxRegexLen {
		return "", fmt.Errorf("%w: the schema expands to a %d-byte grammar (limit %d)", ErrTooLarge, len(re), maxRegexLen)
	}
	return re, nil
}

type schemaCompiler struct {
	root  any
	refs  []string // $refs being expanded, to refuse recursion
	size  int      // subschemas visited
	bytes int      // grammar text built so far, all levels together
}

// grow accounts for n more bytes of grammar text, refusing schemas whose
// expansion ($ref reuse, optional properties) would get too large.
func (c *schemaCompiler) grow(n int) error {
	c.bytes += n
	if c.bytes > 4*maxRegexLen {
		return fmt.Errorf("%w: the schema expands to more than %d bytes of grammar", ErrTooLarge, 4*maxRegexLen)
	}
	return nil
}

func invalidf(path, format string, a ...any) error {
	return fmt.Errorf("%w: json_schema at %q: %s", ErrInvalid, "#"+path, fmt.Sprintf(format, a...))
}

func (c *schemaCompiler) value(v any, path string, depth int) (string, error) {
	if depth > maxSchemaDepth {
		return "", fmt.Errorf("%w: schema nested deeper than %d", ErrTooLarge, maxSchemaDepth)
	}
	c.size++
	if c.size > 100_000 {
		return "", fmt.Errorf("%w: schema has too many subschemas", ErrTooLarge)
	}
	switch s := v.(type) {
	case bool:
		if !s {
			return "", invalidf(path, "the schema false matches nothing")
		}
		return anyValueRegex(anyDepth), nil
	case *object:
		re, err := c.object(s, path, depth)
		if err != nil {
			return "", err
		}
		return re, c.grow(len(re))
	}
	return "", invalidf(path, "a schema must be an object or a boolean")
}

func (c *schemaCompiler) object(s *object, path string, depth int) (string, error) {
	for _, k := range s.keys {
		if !slices.Contains(annotations, k) && !slices.Contains(handled, k) {
			return "", &UnsupportedError{Keyword: k, Path: path}
		}
	}
	// Keywords that replace the type-driven grammar refuse constraining
	// siblings (they would have to be intersected).
	for _, k := range []string{"$ref", "enum", "const", "anyOf"} {
		if _, ok := s.get(k); !ok {
			continue
		}
		for _, o := range s.keys {
			if o == k || slices.Contains(annotations, o) || (o == "type" && (k == "enum" || k == "const")) {
				continue
			}
			return "", &UnsupportedError{Keyword: o, Path: path, Detail: "alongside " + k}
		}
	}
	if r, ok := s.get("$ref"); ok {
		return c.ref(r, path, depth)
	}
	types, err := c.types(s, path)
	if err != nil {
		return "", err
	}
	if e, ok := s.get("enum"); ok {
		vals, ok := e.([]any)
		if !ok {
			return "", invalidf(path+"/enum", "enum must be an array")
		}
		return literals(vals, types, path+"/enum")
	}
	if cv, ok := s.get("const"); ok {
		return literals([]any{cv}, types, path+"/const")
	}
	if a, ok := s.get("anyOf"); ok {
		subs, ok := a.([]any)
		if !ok || len(subs) == 0 {
			return "", invalidf(path+"/anyOf", "anyOf must be a non-empty array")
		}
		alts := make([]string, len(subs))
		for i, sub := range subs {
			if alts[i], err = c.value(sub, fmt.Sprintf("%s/anyOf/%d", path, i), depth+1); err != nil {
				return "", err
			}
		}
		return alt(alts), nil
	}
	if types == nil {
		return c.untyped(s, path, depth)
	}
	alts := make([]string, 0, len(types))
	for _, t := range types {
		re, err := c.typed(s, t, path, depth)
		if err != nil {
			return "", err
		}
		alts = append(alts, re)
	}
	return alt(alts), nil
}

// untyped handles a schema without "type": the keywords present pick the
// type generated (a subset of what the schema accepts).
func (c *schemaCompiler) untyped(s *object, path string, depth int) (string, error) {
	has := func(ks ...string) bool {
		for _, k := range ks {
			if _, ok := s.get(k); ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "required", "additionalProperties"):
		return c.typed(s, "object", path, depth)
	case has("items", "minItems", "maxItems", "uniqueItems"):
		return c.typed(s, "array", path, depth)
	case has("minLength", "maxLength", "format"):
		return c.typed(s, "string", path, depth)
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
		return c.typed(s, "number", path, depth)
	}
	return anyValueRegex(anyDepth), nil
}

var typeNames = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

func (c *schemaCompiler) types(s *object, path string) ([]string, error) {
	t, ok := s.get("type")
	if !ok {
		return nil, nil
	}
	var list []any
	switch tt := t.(type) {
	case string:
		list = []any{tt}
	case []any:
		list = tt
	}
	if len(list) == 0 {
		return nil, invalidf(path+"/type", "type must be a type name or a non-empty array of them")
	}
	var out []string
	for _, e := range list {
		name, ok := e.(string)
		if !ok || !slices.Contains(typeNames, name) {
			return nil, invalidf(path+"/type", "unknown type %v", e)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

func (c *schemaCompiler) ref(r any, path string, depth int) (string, error) {
	ref, ok := r.(string)
	if !ok {
		return "", invalidf(path+"/$ref", "$ref must be a string")
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return "", &UnsupportedError{Keyword: "$ref", Path: path, Detail: "only references inside the schema (#/...) are supported"}
	}
	if slices.Contains(c.refs, ref) {
		return "", &UnsupportedError{Keyword: "$ref", Path: path, Detail: "recursive references are not supported"}
	}
	target := c.root
	if ref != "#" {
		for _, tok := range strings.Split(ref[2:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch t := target.(type) {
			case *object:
				v, ok := t.get(tok)
				if !ok {
					return "", invalidf(path+"/$ref", "%q does not resolve", ref)
				}
				target = v
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(t) {
					return "", invalidf(path+"/$ref", "%q does not resolve", ref)
				}
				target = t[i]
			default:
				return "", invalidf(path+"/$ref", "%q does not resolve", ref)
			}
		}
	}
	c.refs = append(c.refs, ref)
	defer func() { c.refs = c.refs[:len(c.refs)-1] }()
	return c.value(target, strings.TrimPrefix(ref, "#"), depth+1)
}

func (c *schemaCompiler) typed(s *object, t, path string, depth int) (string, error) {
	switch t {
	case "null":
		return "null", nil
	case "boolean":
		return "(?:true|false)", nil
	case "string":
		return stringRegex(s, path)
	case "integer":
		return integerSchema(s, path)
	case "number":
		return numberSchema(s, path)
	case "array":
		return c.array(s, path, depth)
	}
	return c.objectType(s, path, depth)
}

func (c *schemaCompiler) objectType(s *object, path string, depth int) (string, error) {
	var props *object
	if p, ok := s.get("properties"); ok {
		if props, ok = p.(*object); !ok {
			return "", invalidf(path+"/properties", "properties must be an object")
		}
	}
	var required []string
	if r, ok := s.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return "", invalidf(path+"/required", "required must be an array of strings")
		}
		for _, e := range list {
			name, ok := e.(string)
			if !ok {
				return "", invalidf(path+"/required", "required must be an array of strings")
			}
			if props == nil {
				return "", &UnsupportedError{Keyword: "required", Path: path, Detail: fmt.Sprintf("%q is not in properties", name)}
			}
			if _, ok := props.get(name); !ok {
				return "", &UnsupportedError{Keyword: "required", Path: path, Detail: fmt.Sprintf("%q is not in properties", name)}
			}
			required = append(required, name)
		}
	}
	if props == nil || len(props.keys) == 0 {
		ap, _ := s.get("additionalProperties")
		switch a := ap.(type) {
		case bool:
			if !a {
				return `\{\}`, nil
			}
		case *object:
			v, err := c.value(a, path+"/additionalProperties", depth+1)
			if err != nil {
				return "", err
			}
			return mapRegex(v), nil
		}
		return anyObjectRegex(anyDepth), nil
	}
	if ap, ok := s.get("additionalProperties"); ok {
		// Only declared properties are generated, whatever
		// additionalProperties allows; it must still be well-formed.
		switch a := ap.(type) {
		case bool:
		case *object:
			if _, err := c.value(a, path+"/additionalProperties", depth+1); err != nil {
				return "", err
			}
		default:
			return "", invalidf(path+"/additionalProperties", "additionalProperties must be a boolean or a schema")
		}
	}
	n := len(props.keys)
	members := make([]string, n)
	for i, k := range props.keys {
		var key bytes.Buffer
		if err := encodeCompact(&key, k); err != nil {
			return "", invalidf(path, "%v", err)
		}
		v, err := c.value(props.vals[k], path+"/properties/"+escapePointer(k), depth+1)
		if err != nil {
			return "", err
		}
		members[i] = quote(key.String()) + ":" + v
	}
	req := func(i int) bool { return slices.Contains(required, props.keys[i]) }
	// rest[i]: the members from i on, after at least one was written.
	rest := make([]string, n+1)
	for i := n - 1; i >= 0; i-- {
		if err := c.grow(len(members[i]) + len(rest[i+1])); err != nil {
			return "", err
		}
		if req(i) {
			rest[i] = "," + members[i] + rest[i+1]
		} else {
			rest[i] = "(?:," + members[i] + ")?" + rest[i+1]
		}
	}
	// The first member written is any optional one before the first
	// required one, or that required one.
	var firsts []string
	allOptional := true
	for i := 0; i < n; i++ {
		if err := c.grow(len(members[i]) + len(rest[i+1])); err != nil {
			return "", err
		}
		firsts = append(firsts, members[i]+rest[i+1])
		if req(i) {
			allOptional = false
			break
		}
	}
	body := alt(firsts)
	if allOptional {
		body += "?"
	}
	return `\{` + body + `\}`, nil
}

func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

func (c *schemaCompiler) array(s *object, path string, depth int) (string, error) {
	item := anyValueRegex(anyDepth)
	if it, ok := s.get("items"); ok {
		if _, tuple := it.([]any); tuple {
			return "", &UnsupportedError{Keyword: "items", Path: path, Detail: "tuple form (an array of schemas)"}
		}
		var err error
		if item, err = c.value(it, path+"/items", depth+1); err != nil {
			return "", err
		}
	}
	if u, ok := s.get("uniqueItems"); ok {
		if b, isBool := u.(bool); !isBool || b {
			return "", &UnsupportedError{Keyword: "uniqueItems", Path: path, Detail: "only false"}
		}
	}
	lo, err := count(s, "minItems", path, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(s, "maxItems", path, -1)
	if err != nil {
		return "", err
	}
	if lo > maxItemsBound {
		return "", &UnsupportedError{Keyword: "minItems", Path: path, Detail: fmt.Sprintf("at most %d", maxItemsBound)}
	}
	if hi >= 0 && hi < lo {
		return "", invalidf(path, "maxItems %d is below minItems %d", hi, lo)
	}
	if hi > maxItemsBound {
		hi = maxItemsBound
	}
	if hi == 0 {
		return `\[\]`, nil
	}
	body := item + repeat(","+item, max(lo-1, 0), max(hi-1, -1))
	if lo == 0 {
		body = "(?:" + body + ")?"
	}
	return `\[` + body + `\]`, nil
}

// count reads a non-negative integer keyword (def when absent).
func count(s *object, k, path string, def int) (int, error) {
	v, ok := s.get(k)
	if !ok {
		return def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, invalidf(path+"/"+k, "%s must be a non-negative integer", k)
	}
	f, err := n.Float64()
	if err != nil || f < 0 || f != math.Trunc(f) {
		return 0, invalidf(path+"/"+k, "%s must be a non-negative integer", k)
	}
	return int(min(f, 1<<30)), nil
}

func stringRegex(s *object, path string) (string, error) {
	lo, err := count(s, "minLength", path, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(s, "maxLength", path, -1)
	if err != nil {
		return "", err
	}
	if f, ok := s.get("format"); ok {
		name, _ := f.(string)
		re, ok := formats[name]
		if !ok {
			return "", &UnsupportedError{Keyword: "format", Path: path, Detail: fmt.Sprintf("format %v (supported: date, time, date-time, uuid, ipv4)", f)}
		}
		if lo != 0 || hi != -1 {
			return "", &UnsupportedError{Keyword: "minLength", Path: path, Detail: "together with format"}
		}
		return `"` + re + `"`, nil
	}
	if lo > maxLengthBound {
		return "", &UnsupportedError{Keyword: "minLength", Path: path, Detail: fmt.Sprintf("at most %d", maxLengthBound)}
	}
	if hi >= 0 && hi < lo {
		return "", invalidf(path, "maxLength %d is below minLength %d", hi, lo)
	}
	switch {
	case hi > maxLengthBound:
		hi = maxLengthBound
	case hi < 0 && lo == 0:
		return anyString, nil
	}
	return `"` + repeat(boundedChar, lo, hi) + `"`, nil
}

// bound reads a numeric keyword as a float64; ok is false when absent.
func bound(s *object, k, path string) (float64, bool, error) {
	v, ok := s.get(k)
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, false, &UnsupportedError{Keyword: k, Path: path, Detail: "only numeric bounds"}
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) {
		return 0, false, invalidf(path+"/"+k, "%s is not a finite number", k)
	}
	return f, true, nil
}

// intBounds returns the integer interval the numeric keywords allow,
// clamped to what the grammar's 16 digits can write.
func intBounds(s *object, path string, number bool) (lo, hi int64, bounded bool, err error) {
	lo, hi = -maxIntMag, maxIntMag
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		f, ok, err := bound(s, k, path)
		if err != nil {
			return 0, 0, false, err
		}
		if !ok {
			continue
		}
		if number && (strings.HasPrefix(k, "exclusive") || f != math.Trunc(f)) {
			return 0, 0, false, &UnsupportedError{Keyword: k, Path: path, Detail: "type number supports only inclusive integer minimum and maximum"}
		}
		bounded = true
		f = max(min(f, maxIntMag+1), -maxIntMag-1)
		switch k {
		case "minimum":
			lo = max(lo, int64(math.Ceil(f)))
		case "maximum":
			hi = min(hi, int64(math.Floor(f)))
		case "exclusiveMinimum":
			lo = max(lo, int64(math.Floor(f))+1)
		case "exclusiveMaximum":
			hi = min(hi, int64(math.Ceil(f))-1)
		}
	}
	if lo > hi {
		return 0, 0, false, invalidf(path, "no number satisfies the bounds")
	}
	return lo, hi, bounded, nil
}

func integerSchema(s *object, path string) (string, error) {
	lo, hi, bounded, err := intBounds(s, path, false)
	if err != nil || !bounded {
		return integerRegex, err
	}
	return intRange(lo, hi), nil
}

func numberSchema(s *object, path string) (string, error) {
	lo, hi, bounded, err := intBounds(s, path, true)
	if err != nil || !bounded {
		return numberRegex, err
	}
	// Integers in [lo, hi], possibly written with a zero fraction; i.f for
	// i in [max(lo, 0), hi-1]; -i.f for i in [max(-hi, 0), -lo-1].
	alts := []string{intRange(lo, hi) + `(?:\.0{1,15})?`}
	if a, b := max(lo, 0), hi-1; a <= b {
		alts = append(alts, natRange(uint64(a), uint64(b))+fraction)
	}
	if a, b := max(-hi, 0), -lo-1; a <= b {
		alts = append(alts, "-"+natRange(uint64(a), uint64(b))+fraction)
	}
	return alt(alts), nil
}

// literals is the alternation of enum or const values, keeping those of
// the schema's types.
func literals(vals []any, types []string, path string) (string, error) {
	var alts []string
	for _, v := range vals {
		if types != nil && !slices.ContainsFunc(types, func(t string) bool { return hasType(v, t) }) {
			continue
		}
		var b bytes.Buffer
		if err := encodeCompact(&b, v); err != nil {
			return "", invalidf(path, "%v", err)
		}
		alts = append(alts, quote(b.String()))
	}
	if len(alts) == 0 {
		return "", invalidf(path, "no value satisfies the schema")
	}
	return alt(alts), nil
}

func hasType(v any, t string) bool {
	switch x := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case *object:
		return t == "object"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := x.Float64()
		return t == "integer" && err == nil && f == math.Trunc(f)
	}
	return false
}

// anyValueRegex is any JSON value nesting at most depth objects or arrays.
func anyValueRegex(depth int) string {
	if depth == 0 {
		return scalarRegex
	}
	return "(?:" + scalarRegex + "|" + anyObjectRegex(depth-1) + "|" + anyArrayRegex(depth-1) + ")"
}

func anyObjectRegex(depth int) string { return mapRegex(anyValueRegex(depth)) }

func anyArrayRegex(depth int) string {
	v := anyValueRegex(depth)
	return `\[(?:` + v + `(?:,` + v + `)*)?\]`
}

// mapRegex is an object with any keys and values matching v.
func mapRegex(v string) string {
	m := anyString + ":" + v
	return `\{(?:` + m + `(?:,` + m + `)*)?\}`
}

func alt(alts []string) string {
	if len(alts) == 1 {
		return alts[0]
	}
	return "(?:" + strings.Join(alts, "|") + ")"
}

func quote(s string) string { return regexp.QuoteMeta(s) }
