package tokenizer

// The operations a rewritten template calls (see chatstrict.go): Python's
// results where Python computes one, and where Python raises, an error of
// the class jinja2 raises.

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Python's exception classes for template render errors. An error from a
// render wraps ErrChatTemplate and, where warden knows it, one of these.
var (
	// errPyType is Python's TypeError: an operation on the wrong types,
	// such as str + dict or iterating over none.
	errPyType = errors.New("TypeError")
	// errPyUndefined is jinja2's UndefinedError: an attribute, item, call
	// or operation on an undefined value.
	errPyUndefined = errors.New("UndefinedError")
	// errPyZeroDivision is Python's ZeroDivisionError.
	errPyZeroDivision = errors.New("ZeroDivisionError")
	// errPyTemplate is jinja2's TemplateError, as raise_exception raises it.
	errPyTemplate = errors.New("TemplateError")
	// errPySecurity is jinja2's SecurityError: the immutable sandbox
	// refuses a method that changes a list or dict.
	errPySecurity = errors.New("SecurityError")
)

// pyClassOf returns the Python exception class of a render error, or "" if
// it has none (an error of the engine itself).
func pyClassOf(err error) string {
	for _, c := range []error{errPyType, errPyUndefined, errPyZeroDivision, errPyTemplate, errPySecurity} {
		if errors.Is(err, c) {
			return c.Error()
		}
	}
	return ""
}

func pyTypeError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errPyType}, args...)...)
}

// pyTypeName is the name Python's messages give v's type.
func pyTypeName(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "Undefined"
	case v.IsNone():
		return "NoneType"
	case v.IsBool():
		return "bool"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	}
	return "function"
}

// undefinedOperand returns an UndefinedError when an operand is undefined:
// jinja2's Undefined fails every operator but ==, != and iteration.
func undefinedOperand(op string, vals ...jinja.Value) error {
	for _, v := range vals {
		if v.IsUndefined() {
			return fmt.Errorf("%w: an undefined value used with %s", errPyUndefined, op)
		}
	}
	return nil
}

// addChecks sets the helpers of chatstrict.go, raise_exception raising a
// TemplateError, and the length and count filters.
func addChecks(data map[string]jinja.Value) {
	binary := map[string]func(a, b jinja.Value) (jinja.Value, error){
		checkAdd: pyAdd, checkSub: arith("-"), checkMul: pyMul, checkDiv: arith("/"),
		checkFloorDiv: arith("//"), checkMod: arith("%"), checkPow: arith("**"),
		checkLt: compare("<"), checkLe: compare("<="), checkGt: compare(">"), checkGe: compare(">="),
		checkIn: pyIn, checkMutate: pyMutate,
	}
	for name, fn := range binary {
		data[name] = jinja.NewCallable(name, func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 2 {
				return jinja.Value{}, errors.New("operator: want two operands")
			}
			return fn(args[0], args[1])
		})
	}
	unary := map[string]func(v jinja.Value) (jinja.Value, error){
		checkNeg: pyNeg, checkIter: pyIter, checkGet: pyGet,
		filterPrefix + "length": pyLen, filterPrefix + "count": pyLen,
	}
	for name, fn := range unary {
		data[name] = jinja.NewCallable(name, func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) != 1 {
				return jinja.Value{}, errors.New("operator: want one operand")
			}
			return fn(args[0])
		})
	}
	data["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := ""
		if len(args) > 0 {
			msg, _ = pyStr(args[0])
		}
		return jinja.Value{}, fmt.Errorf("%w: %s", errPyTemplate, msg)
	})
}

// pyNumber reports whether v is a Python number (bool is an int) and its
// value, integer and float.
func pyNumber(v jinja.Value) (i int64, f float64, isInt, ok bool) {
	switch {
	case v.IsBool():
		if v.AsBool() {
			return 1, 1, true, true
		}
		return 0, 0, true, true
	case v.IsInt():
		return v.AsInt(), float64(v.AsInt()), true, true
	case v.IsFloat():
		return 0, v.AsFloat(), false, true
	}
	return 0, 0, false, false
}

func pyAdd(a, b jinja.Value) (jinja.Value, error) {
	if err := undefinedOperand("+", a, b); err != nil {
		return jinja.Value{}, err
	}
	switch {
	case a.IsString() && b.IsString():
		return jinja.NewString(a.AsString() + b.AsString()), nil
	case a.IsString():
		return jinja.Value{}, pyTypeError(`can only concatenate str (not "%s") to str`, pyTypeName(b))
	case a.IsList() && b.IsList():
		items := append(append(make([]jinja.Value, 0, len(a.AsList().Items)+len(b.AsList().Items)),
			a.AsList().Items...), b.AsList().Items...)
		return jinja.NewList(items), nil
	case a.IsList():
		return jinja.Value{}, pyTypeError(`can only concatenate list (not "%s") to list`, pyTypeName(b))
	}
	return arith("+")(a, b)
}

// pyMul is Python's *: numbers, or a string or list repeated.
func pyMul(a, b jinja.Value) (jinja.Value, error) {
	if err := undefinedOperand("*", a, b); err != nil {
		return jinja.Value{}, err
	}
	if b.IsString() || b.IsList() {
		a, b = b, a
	}
	n, _, isInt, ok := pyNumber(b)
	if a.IsString() || a.IsList() {
		if !ok || !isInt {
			return jinja.Value{}, pyTypeError("can't multiply sequence by non-int of type '%s'", pyTypeName(b))
		}
		n = max(n, 0)
		if a.IsString() {
			if n > 0 && int64(len(a.AsString())) > maxRepeat/n {
				return jinja.Value{}, pyTypeError("repetition too large")
			}
			return jinja.NewString(strings.Repeat(a.AsString(), int(n))), nil
		}
		src := a.AsList().Items
		if n > 0 && int64(len(src)) > maxRepeat/n {
			return jinja.Value{}, pyTypeError("repetition too large")
		}
		items := make([]jinja.Value, 0, len(src)*int(n))
		for range n {
			items = append(items, src...)
		}
		return jinja.NewList(items), nil
	}
	return arith("*")(a, b)
}

// maxRepeat bounds a string or list built by *.
const maxRepeat = 1 << 24

// arith returns Python's numeric operator op.
func arith(op string) func(a, b jinja.Value) (jinja.Value, error) {
	return func(a, b jinja.Value) (jinja.Value, error) {
		if err := undefinedOperand(op, a, b); err != nil {
			return jinja.Value{}, err
		}
		ai, af, aInt, aok := pyNumber(a)
		bi, bf, bInt, bok := pyNumber(b)
		if !aok || !bok {
			if op == "%" && a.IsString() {
				return pyFormat(a.AsString(), b)
			}
			return jinja.Value{}, pyTypeError("unsupported operand type(s) for %s: '%s' and '%s'", op, pyTypeName(a), pyTypeName(b))
		}
		ints := aInt && bInt
		if (op == "/" || op == "//" || op == "%") && (ints && bi == 0 || !ints && bf == 0) {
			return jinja.Value{}, fmt.Errorf("%w: division by zero", errPyZeroDivision)
		}
		switch op {
		case "+":
			if ints {
				return jinja.NewInt(ai + bi), nil
			}
			return jinja.NewFloat(af + bf), nil
		case "-":
			if ints {
				return jinja.NewInt(ai - bi), nil
			}
			return jinja.NewFloat(af - bf), nil
		case "*":
			if ints {
				return jinja.NewInt(ai * bi), nil
			}
			return jinja.NewFloat(af * bf), nil
		case "/":
			return jinja.NewFloat(af / bf), nil
		case "//":
			if ints {
				q := ai / bi
				if ai%bi != 0 && (ai < 0) != (bi < 0) {
					q--
				}
				return jinja.NewInt(q), nil
			}
			return jinja.NewFloat(math.Floor(af / bf)), nil
		case "%":
			if ints {
				m := ai % bi
				if m != 0 && (m < 0) != (bi < 0) {
					m += bi
				}
				return jinja.NewInt(m), nil
			}
			m := math.Mod(af, bf)
			if m != 0 && (m < 0) != (bf < 0) {
				m += bf
			}
			return jinja.NewFloat(m), nil
		}
		// "**"
		if ints && bi >= 0 {
			r := int64(1)
			for ; bi > 0; bi >>= 1 { // by squaring; wraps where Python's ints grow
				if bi&1 == 1 {
					r *= ai
				}
				ai *= ai
			}
			return jinja.NewInt(r), nil
		}
		if af == 0 && bf < 0 {
			return jinja.Value{}, fmt.Errorf("%w: 0.0 cannot be raised to a negative power", errPyZeroDivision)
		}
		return jinja.NewFloat(math.Pow(af, bf)), nil
	}
}

func pyNeg(v jinja.Value) (jinja.Value, error) {
	if err := undefinedOperand("unary -", v); err != nil {
		return jinja.Value{}, err
	}
	i, f, isInt, ok := pyNumber(v)
	switch {
	case !ok:
		return jinja.Value{}, pyTypeError("bad operand type for unary -: '%s'", pyTypeName(v))
	case isInt:
		return jinja.NewInt(-i), nil
	}
	return jinja.NewFloat(-f), nil
}

// compare returns Python's ordering operator op.
func compare(op string) func(a, b jinja.Value) (jinja.Value, error) {
	return func(a, b jinja.Value) (jinja.Value, error) {
		if err := undefinedOperand(op, a, b); err != nil {
			return jinja.Value{}, err
		}
		c, err := pyCompare(a, b)
		if err != nil {
			return jinja.Value{}, pyTypeError("'%s' not supported between instances of '%s' and '%s'", op, pyTypeName(a), pyTypeName(b))
		}
		ok := map[string]bool{"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
		return jinja.NewBool(ok), nil
	}
}

var errUnordered = errors.New("unordered")

// pyCompare orders numbers, strings (by code point) and lists (item by
// item), as Python does; other pairs are unordered.
func pyCompare(a, b jinja.Value) (int, error) {
	ai, af, aInt, aok := pyNumber(a)
	bi, bf, bInt, bok := pyNumber(b)
	switch {
	case aok && bok && aInt && bInt:
		return cmpOrdered(ai, bi), nil
	case aok && bok:
		return cmpOrdered(af, bf), nil
	case a.IsString() && b.IsString():
		return strings.Compare(a.AsString(), b.AsString()), nil
	case a.IsList() && b.IsList():
		x, y := a.AsList().Items, b.AsList().Items
		for i := 0; i < len(x) && i < len(y); i++ {
			if pyEqual(x[i], y[i]) {
				continue
			}
			return pyCompare(x[i], y[i])
		}
		return cmpOrdered(len(x), len(y)), nil
	}
	return 0, errUnordered
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pyEqual is Python's ==: numbers by value (True == 1), else the engine's
// equality.
func pyEqual(a, b jinja.Value) bool {
	_, af, _, aok := pyNumber(a)
	_, bf, _, bok := pyNumber(b)
	if aok && bok {
		return af == bf
	}
	return a.Equals(b)
}

// pyIn is Python's "a in b".
func pyIn(a, b jinja.Value) (jinja.Value, error) {
	switch {
	case b.IsUndefined():
		return jinja.NewBool(false), nil // jinja2's Undefined iterates as empty
	case b.IsString():
		if !a.IsString() {
			if a.IsUndefined() {
				return jinja.Value{}, undefinedOperand("in", a)
			}
			return jinja.Value{}, pyTypeError("'in <string>' requires string as left operand, not %s", pyTypeName(a))
		}
		return jinja.NewBool(strings.Contains(b.AsString(), a.AsString())), nil
	case b.IsList():
		for _, it := range b.AsList().Items {
			if pyEqual(it, a) {
				return jinja.NewBool(true), nil
			}
		}
		return jinja.NewBool(false), nil
	case b.IsDict():
		if a.IsList() || a.IsDict() {
			return jinja.Value{}, pyTypeError("unhashable type: '%s'", pyTypeName(a))
		}
		return jinja.NewBool(a.IsString() && b.AsDict().Has(a.AsString())), nil
	}
	return jinja.Value{}, pyTypeError("argument of type '%s' is not iterable", pyTypeName(b))
}

// pyIter passes what Python can iterate (undefined iterates as empty) and
// refuses the rest.
func pyIter(v jinja.Value) (jinja.Value, error) {
	if v.IsUndefined() || v.IsString() || v.IsList() || v.IsDict() {
		return v, nil
	}
	return jinja.Value{}, pyTypeError("'%s' object is not iterable", pyTypeName(v))
}

// pyGet passes a value whose attribute or item is read, or that is
// called; jinja2 refuses all three on an undefined value.
func pyGet(v jinja.Value) (jinja.Value, error) {
	if v.IsUndefined() {
		return jinja.Value{}, fmt.Errorf("%w: an attribute, item or call of an undefined value", errPyUndefined)
	}
	return v, nil
}

// listMutators and dictMutators are the methods jinja2's immutable sandbox
// refuses on lists and on dicts.
var (
	listMutators = map[string]bool{"append": true, "clear": true, "pop": true, "reverse": true, "insert": true, "sort": true, "extend": true, "remove": true}
	dictMutators = map[string]bool{"clear": true, "pop": true, "popitem": true, "setdefault": true, "update": true}
)

// pyMutate passes v, whose method name is called, unless that method
// changes a list or dict (or v is undefined).
func pyMutate(v, name jinja.Value) (jinja.Value, error) {
	if _, err := pyGet(v); err != nil {
		return jinja.Value{}, err
	}
	method := name.AsString()
	if v.IsList() && listMutators[method] || v.IsDict() && dictMutators[method] {
		return jinja.Value{}, fmt.Errorf("%w: access to attribute '%s' of '%s' object is unsafe", errPySecurity, method, pyTypeName(v))
	}
	return v, nil
}

// pyLen is the length filter: Python's len(); undefined has length 0.
func pyLen(v jinja.Value) (jinja.Value, error) {
	switch {
	case v.IsUndefined():
		return jinja.NewInt(0), nil
	case v.IsString():
		return jinja.NewInt(int64(len([]rune(v.AsString())))), nil
	case v.IsList():
		return jinja.NewInt(int64(len(v.AsList().Items))), nil
	case v.IsDict():
		return jinja.NewInt(int64(v.AsDict().Len())), nil
	}
	return jinja.Value{}, pyTypeError("object of type '%s' has no len()", pyTypeName(v))
}

// pyFormat is Python's printf-style str % arg for the conversions
// s, d, i, u, f, F, e, E, g, G, x, X, o and %% with flags, width and
// precision; a list on the right is the tuple of arguments, a dict the
// mapping of %(key)s.
func pyFormat(format string, arg jinja.Value) (jinja.Value, error) {
	args := []jinja.Value{arg}
	if arg.IsList() {
		args = arg.AsList().Items
	}
	used := 0
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			b.WriteByte(format[i])
			continue
		}
		j := i + 1
		var v jinja.Value
		keyed := false
		if j < len(format) && format[j] == '(' {
			end := strings.IndexByte(format[j:], ')')
			if end < 0 || !arg.IsDict() {
				return jinja.Value{}, pyTypeError("format requires a mapping")
			}
			val, ok := arg.AsDict().Get(format[j+1 : j+end])
			if !ok {
				return jinja.Value{}, fmt.Errorf("%w: KeyError: %q", ErrChatTemplate, format[j+1:j+end])
			}
			v, keyed, j = val, true, j+end+1
		}
		spec := j
		for j < len(format) && strings.IndexByte("-+ 0#.123456789", format[j]) >= 0 {
			j++
		}
		if j == len(format) {
			return jinja.Value{}, fmt.Errorf("%w: ValueError: incomplete format", ErrChatTemplate)
		}
		flags, conv := format[spec:j], format[j]
		i = j
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !keyed {
			if used == len(args) {
				return jinja.Value{}, pyTypeError("not enough arguments for format string")
			}
			v, used = args[used], used+1
		}
		switch conv {
		case 's':
			str, err := pyStr(v)
			if err != nil {
				str = v.String()
			}
			fmt.Fprintf(&b, "%"+flags+"s", str)
		case 'd', 'i', 'u', 'x', 'X', 'o':
			n, f, isInt, ok := pyNumber(v)
			if !ok || (!isInt && (conv == 'x' || conv == 'X' || conv == 'o')) {
				return jinja.Value{}, pyTypeError("%%%c format: a real number is required, not %s", conv, pyTypeName(v))
			}
			if !isInt {
				n = int64(f)
			}
			verb := map[byte]string{'x': "x", 'X': "X", 'o': "o"}[conv]
			if verb == "" {
				verb = "d"
			}
			fmt.Fprintf(&b, "%"+flags+verb, n)
		case 'f', 'F', 'e', 'E', 'g', 'G':
			_, f, _, ok := pyNumber(v)
			if !ok {
				return jinja.Value{}, pyTypeError("must be real number, not %s", pyTypeName(v))
			}
			if !strings.Contains(flags, ".") {
				flags += ".6"
			}
			out := fmt.Sprintf("%"+flags+string(conv|0x20), f) // Go's %F is %f
			if conv == 'E' || conv == 'G' {
				out = strings.ToUpper(out) // only the exponent's e has a case
			}
			b.WriteString(out)
		default:
			return jinja.Value{}, fmt.Errorf("%w: ValueError: unsupported format character '%c'", ErrChatTemplate, conv)
		}
	}
	if !arg.IsDict() && used < len(args) {
		return jinja.Value{}, pyTypeError("not all arguments converted during string formatting")
	}
	return jinja.NewString(b.String()), nil
}
