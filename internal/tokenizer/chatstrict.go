package tokenizer

// Python's failures in the template source. The Jinja engine forgives what
// Python jinja2 refuses: it concatenates a string and a dict, iterates over
// none as over nothing, reads an attribute of an undefined value. A
// template that fails in Python under transformers never rendered a prompt
// the model saw, so warden must fail there too instead of writing, say, a
// Python dict into the prompt. Each tag's expressions are parsed the way
// the engine parses them and written back with the operations that can
// fail in Python routed through Python-exact helpers (chatpyops.go):
//
//	a + b          →  __warden_add(a, b)       (also - * / // % ** and unary -)
//	a < b          →  __warden_lt(a, b)        (also <= > >=)
//	a in b         →  __warden_in(a, b)        (not in: (not __warden_in(a, b)))
//	for x in e     →  for x in __warden_iter(e)
//	e.name, e[k]   →  __warden_get(e).name, __warden_get(e)[k]
//	f(args)        →  __warden_get(f)(args)
//	e.m(args)      →  __warden_get(__warden_get(e).m)(args)
//	e.append(x)    →  __warden_get(__warden_mutate(e, 'append').append)(x)  (see mutators)
//
// Everything else is written back as it was, parenthesized, so the engine
// evaluates the same tree. A tag this parser does not understand is left
// as it is (the engine then reports its syntax error, or renders with its
// own semantics).

import (
	"errors"
	"strings"
)

// Names of the helpers the rewritten source calls.
const (
	checkAdd      = filterPrefix + "add"
	checkSub      = filterPrefix + "sub"
	checkMul      = filterPrefix + "mul"
	checkDiv      = filterPrefix + "div"
	checkFloorDiv = filterPrefix + "floordiv"
	checkMod      = filterPrefix + "mod"
	checkPow      = filterPrefix + "pow"
	checkNeg      = filterPrefix + "neg"
	checkLt       = filterPrefix + "lt"
	checkLe       = filterPrefix + "le"
	checkGt       = filterPrefix + "gt"
	checkGe       = filterPrefix + "ge"
	checkIn       = filterPrefix + "in"
	checkIter     = filterPrefix + "iter"
	checkGet      = filterPrefix + "get"
	checkMutate   = filterPrefix + "mutate"
)

// pyStrips are the methods that, without arguments, strip Python's white
// space (see bareStrip).
var pyStrips = map[string]bool{"strip": true, "lstrip": true, "rstrip": true}

// mutators are the methods of lists and dicts that change them, which
// jinja2's immutable sandbox refuses: e.append(x) →
// __warden_mutate(e, 'append').append(x).
var mutators = map[string]bool{
	"append": true, "clear": true, "pop": true, "reverse": true, "insert": true, "sort": true, "extend": true,
	"remove": true, "popitem": true, "setdefault": true, "update": true,
}

// binaryCheck is the helper of each binary operator Python can refuse.
var binaryCheck = map[string]string{
	"+": checkAdd, "-": checkSub, "*": checkMul, "/": checkDiv, "//": checkFloorDiv, "%": checkMod,
	"**": checkPow, "<": checkLt, "<=": checkLe, ">": checkGt, ">=": checkGe,
}

// checkTag rewrites the body of a {{ }} (expr true) or {% %} tag, without
// its delimiters and whitespace-control dashes; a body it cannot parse is
// returned as it is.
func checkTag(body string, expr bool) string {
	var out string
	var err error
	if expr {
		out, err = checkExpr(body)
	} else {
		out, err = checkStatement(body)
	}
	if err != nil {
		return body
	}
	// Spaced off the delimiters: "{ }" + "}}" would read as "{ " + "}}}".
	return " " + strings.TrimSpace(out) + " "
}

// checkStatement rewrites the expressions of if, elif, for and set
// statements, split as the engine splits them; other statements stay.
func checkStatement(body string) (string, error) {
	text := strings.TrimSpace(body)
	kw := text
	if i := strings.IndexFunc(text, func(r rune) bool { return !isIdentByte(r) }); i >= 0 {
		kw = text[:i]
	}
	rest := strings.TrimSpace(text[len(kw):])
	switch kw {
	case "if", "elif":
		e, err := checkExpr(rest)
		return " " + kw + " " + e + " ", err
	case "set":
		target, value, ok := strings.Cut(rest, "=")
		if !ok {
			return body, nil
		}
		e, err := checkExpr(value)
		return " set " + strings.TrimSpace(target) + " = " + e + " ", err
	case "for":
		in := findKeyword(rest, "in")
		if in < 0 {
			return "", errNoParse
		}
		vars, iter := strings.TrimSpace(rest[:in]), strings.TrimSpace(rest[in+2:])
		suffix := ""
		if r := findKeyword(iter, "recursive"); r >= 0 {
			iter, suffix = strings.TrimSpace(iter[:r]), " recursive"
		}
		if f := findKeyword(iter, "if"); f >= 0 {
			cond, err := checkExpr(iter[f+2:])
			if err != nil {
				return "", err
			}
			iter, suffix = strings.TrimSpace(iter[:f]), " if "+cond+suffix
		}
		e, err := checkExpr(iter)
		return " for " + vars + " in " + checkIter + "(" + e + ")" + suffix + " ", err
	}
	return body, nil
}

// findKeyword returns the index of the word kw in s outside strings and
// brackets, or -1, as the engine finds a statement's keywords.
func findKeyword(s, kw string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			i = stringEnd(s, i) - 1
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case depth == 0 && strings.HasPrefix(s[i:], kw) &&
			(i == 0 || !isIdentByte(rune(s[i-1]))) &&
			(i+len(kw) == len(s) || !isIdentByte(rune(s[i+len(kw)]))):
			return i
		}
	}
	return -1
}

func isIdentByte(r rune) bool {
	return r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

// stringEnd returns the index after the string literal starting at s[i].
func stringEnd(s string, i int) int {
	j := i + 1
	for j < len(s) && s[j] != s[i] {
		if s[j] == '\\' && j+1 < len(s) {
			j++
		}
		j++
	}
	return min(j+1, len(s))
}

var errNoParse = errors.New("expression not understood")

// exprKeywords are the words that change meaning when the rewrite moves
// them; an expression using one as a plain name is left as it is.
var exprKeywords = map[string]bool{"not": true, "and": true, "or": true, "if": true, "else": true, "in": true, "is": true}

// exprTok is a token of the engine's expression syntax: kind is "name",
// "num", "str", "eof" or the punctuation itself; text is the source.
type exprTok struct{ kind, text string }

// tokenizeExpr splits s as the engine does (unknown characters skipped).
func tokenizeExpr(s string) []exprTok {
	var toks []exprTok
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'' || c == '"':
			j := stringEnd(s, i)
			toks = append(toks, exprTok{"str", s[i:j]})
			i = j
		case '0' <= c && c <= '9':
			j := i
			for j < len(s) && '0' <= s[j] && s[j] <= '9' {
				j++
			}
			if j+1 < len(s) && s[j] == '.' && '0' <= s[j+1] && s[j+1] <= '9' {
				for j++; j < len(s) && '0' <= s[j] && s[j] <= '9'; j++ {
				}
				if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
					j++
					if j < len(s) && (s[j] == '+' || s[j] == '-') {
						j++
					}
					for j < len(s) && '0' <= s[j] && s[j] <= '9' {
						j++
					}
				}
			}
			toks = append(toks, exprTok{"num", s[i:j]})
			i = j
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			j := i
			for j < len(s) && isIdentByte(rune(s[j])) {
				j++
			}
			toks = append(toks, exprTok{"name", s[i:j]})
			i = j
		default:
			if i+1 < len(s) {
				switch two := s[i : i+2]; two {
				case "**", "//", "==", "!=", "<=", ">=":
					toks = append(toks, exprTok{two, two})
					i += 2
					continue
				}
			}
			if strings.IndexByte(",.:()[]{}|~+-*/%<>=", c) >= 0 {
				toks = append(toks, exprTok{string(c), string(c)})
			}
			i++
		}
	}
	return append(toks, exprTok{"eof", ""})
}

// exprWriter parses tokens with the engine's grammar and precedence and
// writes the checked expression.
type exprWriter struct {
	toks []exprTok
	pos  int
}

func checkExpr(s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return s, nil
	}
	w := &exprWriter{toks: tokenizeExpr(s)}
	out, err := w.expression()
	if err == nil && w.peek().kind != "eof" {
		err = errNoParse
	}
	return out, err
}

func (w *exprWriter) peek() exprTok { return w.toks[w.pos] }

func (w *exprWriter) next() exprTok {
	t := w.toks[w.pos]
	if t.kind != "eof" {
		w.pos++
	}
	return t
}

func (w *exprWriter) isName(name string) bool {
	t := w.peek()
	return t.kind == "name" && t.text == name
}

func (w *exprWriter) expect(kind string) error {
	if w.next().kind != kind {
		return errNoParse
	}
	return nil
}

// expression: or ["if" or ["else" expression]].
func (w *exprWriter) expression() (string, error) {
	e, err := w.or()
	if err != nil || !w.isName("if") {
		return e, err
	}
	w.next()
	cond, err := w.or()
	if err != nil {
		return "", err
	}
	if !w.isName("else") {
		return "(" + e + " if " + cond + ")", nil
	}
	w.next()
	alt, err := w.expression()
	return "(" + e + " if " + cond + " else " + alt + ")", err
}

// keywordLevel parses operand (op operand)* for the keyword operators.
func (w *exprWriter) keywordLevel(op string, operand func() (string, error)) (string, error) {
	left, err := operand()
	for err == nil && w.isName(op) {
		w.next()
		var right string
		right, err = operand()
		left = "(" + left + " " + op + " " + right + ")"
	}
	return left, err
}

func (w *exprWriter) or() (string, error) { return w.keywordLevel("or", w.and) }

func (w *exprWriter) and() (string, error) { return w.keywordLevel("and", w.not) }

func (w *exprWriter) not() (string, error) {
	if !w.isName("not") {
		return w.comparison()
	}
	w.next()
	e, err := w.not()
	return "(not " + e + ")", err
}

// comparison: concat ((== != < > <= >= in "not in") concat | is [not] test[(args)])*.
func (w *exprWriter) comparison() (string, error) {
	left, err := w.concat()
	for err == nil {
		t := w.peek()
		switch {
		case t.kind == "==" || t.kind == "!=":
			w.next()
			var right string
			right, err = w.concat()
			left = "(" + left + " " + t.kind + " " + right + ")"
		case t.kind == "<" || t.kind == ">" || t.kind == "<=" || t.kind == ">=":
			w.next()
			var right string
			right, err = w.concat()
			left = binaryCheck[t.kind] + "(" + left + ", " + right + ")"
		case w.isName("in"):
			w.next()
			var right string
			right, err = w.concat()
			left = checkIn + "(" + left + ", " + right + ")"
		case w.isName("not") && w.toks[w.pos+1].kind == "name" && w.toks[w.pos+1].text == "in":
			w.pos += 2
			var right string
			right, err = w.concat()
			left = "(not " + checkIn + "(" + left + ", " + right + "))"
		case w.isName("is"):
			w.next()
			neg := ""
			if w.isName("not") {
				w.next()
				neg = "not "
			}
			name := w.next()
			if name.kind != "name" {
				return "", errNoParse
			}
			test := name.text
			if w.peek().kind == "(" {
				w.next()
				var args []string
				for w.peek().kind != ")" && w.peek().kind != "eof" {
					var a string
					if a, err = w.expression(); err != nil {
						return "", err
					}
					args = append(args, a)
					if w.peek().kind == "," {
						w.next()
					}
				}
				if err = w.expect(")"); err != nil {
					return "", err
				}
				test += "(" + strings.Join(args, ", ") + ")"
			}
			left = "(" + left + " is " + neg + test + ")"
		default:
			return left, nil
		}
	}
	return "", err
}

func (w *exprWriter) concat() (string, error) {
	left, err := w.addSub()
	for err == nil && w.peek().kind == "~" {
		w.next()
		var right string
		right, err = w.addSub()
		left = "(" + left + " ~ " + right + ")"
	}
	return left, err
}

// arith parses operand (op operand)* for the arithmetic operators in ops,
// each written as its helper call.
func (w *exprWriter) arith(ops string, operand func() (string, error)) (string, error) {
	left, err := operand()
	for err == nil && strings.Contains(ops, " "+w.peek().kind+" ") {
		op := w.next().kind
		var right string
		right, err = operand()
		left = binaryCheck[op] + "(" + left + ", " + right + ")"
	}
	return left, err
}

func (w *exprWriter) addSub() (string, error) { return w.arith(" + - ", w.mulDiv) }

func (w *exprWriter) mulDiv() (string, error) { return w.arith(" * / % // ", w.power) }

// power: unary ["**" unary] (one power, as the engine parses it).
func (w *exprWriter) power() (string, error) {
	base, err := w.unary()
	if err != nil || w.peek().kind != "**" {
		return base, err
	}
	w.next()
	exp, err := w.unary()
	return checkPow + "(" + base + ", " + exp + ")", err
}

func (w *exprWriter) unary() (string, error) {
	switch w.peek().kind {
	case "-":
		w.next()
		e, err := w.unary()
		return checkNeg + "(" + e + ")", err
	case "+":
		w.next()
		e, err := w.unary()
		return "(+" + e + ")", err
	}
	return w.postfix()
}

// postfix: atom (.name [call] | [item or slice] | (call) | "|" filter[(args)])*.
func (w *exprWriter) postfix() (string, error) {
	e, err := w.atom()
	for err == nil {
		switch w.peek().kind {
		case ".":
			w.next()
			attr := w.next()
			if attr.kind != "name" && attr.kind != "num" {
				return "", errNoParse
			}
			if w.peek().kind == "(" && mutators[attr.text] {
				e = checkMutate + "(" + e + ", '" + attr.text + "')." + attr.text
			} else {
				e = checkGet + "(" + e + ")." + attr.text
			}
			if w.peek().kind == "(" {
				w.next()
				var args string
				args, err = w.callArgs()
				if args == "" && pyStrips[attr.text] {
					args = pySpaceVar // see bareStrip
				}
				e = checkGet + "(" + e + ")(" + args + ")"
			}
		case "[":
			w.next()
			e = checkGet + "(" + e + ")["
			var sub string
			sub, err = w.subscript()
			e += sub + "]"
		case "(":
			w.next()
			var args string
			args, err = w.callArgs()
			e = checkGet + "(" + e + ")(" + args + ")"
		case "|":
			w.next()
			name := w.next()
			if name.kind != "name" {
				return "", errNoParse
			}
			e = "(" + e + "|" + name.text
			if w.peek().kind == "(" {
				w.next()
				var args string
				args, err = w.callArgs()
				e += "(" + args + ")"
			}
			e += ")"
		default:
			return e, nil
		}
	}
	return "", err
}

// subscript parses what is inside [ ] after the "[": a key or a slice,
// and the closing "]".
func (w *exprWriter) subscript() (string, error) {
	var parts [3]string
	n := 0 // the colons seen
	for {
		switch w.peek().kind {
		case "]":
			w.next()
			if n == 0 {
				if parts[0] == "" {
					return "", errNoParse
				}
				return parts[0], nil
			}
			return strings.Join(parts[:n+1], ":"), nil
		case ":":
			if n == 2 {
				return "", errNoParse
			}
			w.next()
			n++
		default:
			if parts[n] != "" {
				return "", errNoParse
			}
			e, err := w.expression()
			if err != nil {
				return "", err
			}
			parts[n] = e
		}
	}
}

// callArgs parses arguments after "(" up to and including ")".
func (w *exprWriter) callArgs() (string, error) {
	var args []string
	for w.peek().kind != ")" && w.peek().kind != "eof" {
		kw := ""
		if w.peek().kind == "name" && w.toks[w.pos+1].kind == "=" {
			kw = w.next().text + "="
			w.next()
		}
		e, err := w.expression()
		if err != nil {
			return "", err
		}
		args = append(args, kw+e)
		if w.peek().kind == "," {
			w.next()
		}
	}
	return strings.Join(args, ", "), w.expect(")")
}

// items parses expressions separated by optional commas up to close.
func (w *exprWriter) items(close string) ([]string, error) {
	var items []string
	for w.peek().kind != close && w.peek().kind != "eof" {
		e, err := w.expression()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if w.peek().kind == "," {
			w.next()
		}
	}
	return items, w.expect(close)
}

func (w *exprWriter) atom() (string, error) {
	t := w.next()
	switch t.kind {
	case "name":
		if exprKeywords[t.text] {
			return "", errNoParse // a name only where the engine is lenient
		}
		return t.text, nil
	case "num", "str":
		return t.text, nil
	case "(":
		if w.peek().kind == ")" {
			w.next()
			return "()", nil
		}
		e, err := w.expression()
		if err != nil {
			return "", err
		}
		if w.peek().kind != "," {
			return "(" + e + ")", w.expect(")")
		}
		items := []string{e}
		for w.peek().kind == "," {
			w.next()
			if w.peek().kind == ")" {
				break
			}
			if e, err = w.expression(); err != nil {
				return "", err
			}
			items = append(items, e)
		}
		return "(" + strings.Join(items, ", ") + ",)", w.expect(")")
	case "[":
		items, err := w.items("]")
		return "[" + strings.Join(items, ", ") + "]", err
	case "{":
		var pairs []string
		for w.peek().kind != "}" && w.peek().kind != "eof" {
			k, err := w.expression()
			if err != nil {
				return "", err
			}
			if err := w.expect(":"); err != nil {
				return "", err
			}
			v, err := w.expression()
			if err != nil {
				return "", err
			}
			pairs = append(pairs, k+": "+v)
			if w.peek().kind == "," {
				w.next()
			}
		}
		// Spaces inside the braces: "}}" would end a {{ }} tag.
		return "{ " + strings.Join(pairs, ", ") + " }", w.expect("}")
	case "-":
		e, err := w.atom()
		return checkNeg + "(" + e + ")", err
	}
	return "", errNoParse
}
