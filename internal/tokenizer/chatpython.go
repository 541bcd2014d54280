package tokenizer

// Python-exact versions of the template helpers transformers provides, for
// where the Jinja engine's own differ (see rewriteTemplate).

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// addFilters sets the Python-exact tojson and trim filters (see
// overriddenFilter) and strftime_now formatting now.
func addFilters(data map[string]jinja.Value, now time.Time) {
	data[filterPrefix+"tojson"] = jinja.NewCallable("tojson", pyToJSON)
	data[filterPrefix+"trim"] = jinja.NewCallable("trim", pyTrim)
	data[pySpaceVar] = jinja.NewString(pySpaceChars)
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Value{}, errors.New("strftime_now: want one format string")
		}
		return jinja.NewString(strftime(now, args[0].AsString())), nil
	})
}

// pyTrim is Jinja's trim filter: Python's str.strip(chars).
func pyTrim(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Value{}, errors.New("trim: no value")
	}
	s, err := pyStr(args[0])
	if err != nil {
		return jinja.Value{}, fmt.Errorf("trim: %w", err)
	}
	chars, ok := kwargs["chars"]
	if len(args) > 1 {
		chars, ok = args[1], true
	}
	if ok && !chars.IsNone() {
		if !chars.IsString() {
			return jinja.Value{}, errors.New("trim: chars must be a string")
		}
		return jinja.NewString(strings.Trim(s, chars.AsString())), nil
	}
	return jinja.NewString(strings.TrimFunc(s, pySpace)), nil
}

// pyStr is Python's str() of a scalar.
func pyStr(v jinja.Value) (string, error) {
	switch {
	case v.IsString():
		return v.AsString(), nil
	case v.IsUndefined():
		return "", nil
	case v.IsNone():
		return "None", nil
	case v.IsBool():
		if v.AsBool() {
			return "True", nil
		}
		return "False", nil
	case v.IsInt():
		return strconv.FormatInt(v.AsInt(), 10), nil
	case v.IsFloat():
		return pyFloat(v.AsFloat(), false), nil
	}
	return "", errors.New("not a string")
}

// pyToJSON is transformers' tojson filter: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), byte for byte.
func pyToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Value{}, errors.New("tojson: no value")
	}
	opt := func(pos int, name string) (jinja.Value, bool) {
		if pos < len(args) {
			return args[pos], true
		}
		v, ok := kwargs[name]
		return v, ok && !v.IsNone()
	}
	e := jsonEncoder{item: ", ", key: ": "}
	if v, ok := opt(1, "ensure_ascii"); ok {
		e.ascii = v.IsTruthy()
	}
	if v, ok := opt(2, "indent"); ok {
		switch {
		case v.IsInt():
			e.indent = strings.Repeat(" ", int(max(0, min(v.AsInt(), 64))))
		case v.IsString():
			e.indent = v.AsString()
		default:
			return jinja.Value{}, errors.New("tojson: indent must be an integer or a string")
		}
		e.indented, e.item = true, ","
	}
	if v, ok := opt(3, "separators"); ok {
		if !v.IsList() || len(v.AsList().Items) != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Value{}, errors.New("tojson: separators must be two strings")
		}
		e.item, e.key = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	if v, ok := opt(4, "sort_keys"); ok {
		e.sortKeys = v.IsTruthy()
	}
	if err := e.encode(args[0], 0); err != nil {
		return jinja.Value{}, fmt.Errorf("tojson: %w", err)
	}
	return jinja.NewString(e.b.String()), nil
}

// jsonEncoder writes JSON as Python's json.dumps does.
type jsonEncoder struct {
	b         strings.Builder
	item, key string
	indent    string
	indented  bool
	ascii     bool
	sortKeys  bool
}

func (e *jsonEncoder) newline(level int) {
	if e.indented {
		e.b.WriteByte('\n')
		for range level {
			e.b.WriteString(e.indent)
		}
	}
}

func (e *jsonEncoder) encode(v jinja.Value, level int) error {
	if level > maxJSONDepth {
		return errors.New("nested too deep")
	}
	switch {
	case v.IsNone():
		e.b.WriteString("null")
	case v.IsBool():
		e.b.WriteString(map[bool]string{true: "true", false: "false"}[v.AsBool()])
	case v.IsInt():
		e.b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.b.WriteString(pyFloat(v.AsFloat(), true))
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				e.b.WriteString(e.item)
			}
			e.newline(level + 1)
			if err := e.encode(it, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			e.b.WriteString("{}")
			return nil
		}
		if e.sortKeys {
			sort.Strings(keys)
		}
		e.b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				e.b.WriteString(e.item)
			}
			e.newline(level + 1)
			e.str(k)
			e.b.WriteString(e.key)
			val, _ := d.Get(k)
			if err := e.encode(val, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.b.WriteByte('}')
	default:
		return pyTypeError("Object of type %s is not JSON serializable", pyTypeName(v))
	}
	return nil
}

// str writes s as a JSON string the way Python escapes it.
func (e *jsonEncoder) str(s string) {
	e.b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			e.b.WriteString(`\"`)
		case '\\':
			e.b.WriteString(`\\`)
		case '\n':
			e.b.WriteString(`\n`)
		case '\r':
			e.b.WriteString(`\r`)
		case '\t':
			e.b.WriteString(`\t`)
		case '\b':
			e.b.WriteString(`\b`)
		case '\f':
			e.b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || e.ascii && r > 0x7e && r <= 0xffff:
				fmt.Fprintf(&e.b, `\u%04x`, r)
			case e.ascii && r > 0xffff:
				r -= 0x10000
				fmt.Fprintf(&e.b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				e.b.WriteRune(r)
			}
		}
	}
	e.b.WriteByte('"')
}

// pyFloat is Python's repr of a float; json selects json.dumps's spelling of
// the non-finite values.
func pyFloat(f float64, json bool) string {
	switch {
	case math.IsNaN(f):
		return map[bool]string{true: "NaN", false: "nan"}[json]
	case math.IsInf(f, 1):
		return map[bool]string{true: "Infinity", false: "inf"}[json]
	case math.IsInf(f, -1):
		return map[bool]string{true: "-Infinity", false: "-inf"}[json]
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±dd
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // the value is 0.digits × 10^decpt
	switch {
	case decpt > 16 || decpt <= -4:
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := strconv.Itoa(abs(exp))
		if len(es) < 2 {
			es = "0" + es
		}
		return sign + m + "e" + map[bool]string{true: "-", false: "+"}[exp < 0] + es
	case decpt <= 0:
		return sign + "0." + strings.Repeat("0", -decpt) + digits
	case decpt >= len(digits):
		return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
	}
	return sign + digits[:decpt] + "." + digits[decpt:]
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// strftime formats t as Python's time.strftime in the C locale does, for
// the common directives; others are written out as they are.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// pySpaceVar names the variable holding every character Python's
// str.strip() strips.
const pySpaceVar = filterPrefix + "pyspace"

const pySpaceChars = "\t\n\v\f\r\x1c\x1d\x1e\x1f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004" +
	"\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"

// pySpace reports whether Python's str.strip() strips r: Go's white space
// plus the separators U+001C-U+001F.
func pySpace(r rune) bool {
	return unicode.IsSpace(r) || 0x1c <= r && r <= 0x1f
}
