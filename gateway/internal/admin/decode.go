package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/warden-ai/warden/internal/adminclient"
)

// readBody decodes r's body strictly into v (see decodeJSON). The body is
// read up to MaxBodyBytes; more is 413.
func readBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return apiErr(http.StatusRequestEntityTooLarge, adminclient.CodeRequestTooLarge, "",
				"Request body is larger than the limit of %d bytes.", MaxBodyBytes)
		}
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidJSON, "", "Could not read the request body: %v.", err)
	}
	if e := decodeJSON(data, v, allowEmpty); e != nil {
		return e
	}
	return nil
}

// decodeJSON decodes data, which must be one UTF-8 JSON object, into v, a
// pointer to a struct. Every member must be a field of v's type (matched
// exactly, at any depth); the first that is not is reported by its path.
// An empty body is an empty object when allowEmpty.
func decodeJSON(data []byte, v any, allowEmpty bool) *adminclient.Error {
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) == 0 && allowEmpty:
		return nil
	case len(trimmed) == 0:
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidJSON, "", "The request body is empty; send a JSON object.")
	case !utf8.Valid(data):
		// Checked first: encoding/json would silently replace bad bytes.
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidEncoding, "", "The request body is not valid UTF-8.")
	}
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(json.RawMessage))
		if syn, ok := errors.AsType[*json.SyntaxError](err); ok {
			return apiErr(http.StatusBadRequest, adminclient.CodeInvalidJSON, "",
				"The request body is not valid JSON: %v (at byte %d).", syn, syn.Offset)
		}
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidJSON, "", "The request body is not valid JSON.")
	}
	if trimmed[0] != '{' {
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidJSON, "", "The request body must be a JSON object.")
	}
	if p := unknownField(trimmed, reflect.TypeOf(v)); p != "" {
		return apiErr(http.StatusBadRequest, adminclient.CodeUnknownField, p, "Unknown field %q.", p)
	}
	if err := json.Unmarshal(trimmed, v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			return apiErr(http.StatusBadRequest, adminclient.CodeInvalidType, te.Field,
				"Invalid type for %q: expected %s, got %s.", te.Field, jsonKind(te.Type), te.Value)
		}
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidJSON, "", "The request body could not be decoded: %v.", err)
	}
	return nil
}

// jsonKind names the JSON form of a Go type in an error message.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// unknownField returns the path of the first object member in data, in
// document order, that t (after pointers) does not declare, or "". data is
// valid JSON. Types with their own UnmarshalJSON are not looked into.
func unknownField(data []byte, t reflect.Type) string {
	return unknownFieldAt(data, t, "")
}

func unknownFieldAt(data []byte, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		dec := json.NewDecoder(bytes.NewReader(data))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return "" // not an object: the typed decode reports it
		}
		fields := jsonFields(t)
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return ""
			}
			name, _ := tok.(string)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return ""
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			ft, ok := fields[name]
			if !ok {
				return p
			}
			if q := unknownFieldAt(raw, ft, p); q != "" {
				return q
			}
		}
	case reflect.Slice, reflect.Array:
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return ""
		}
		for i, item := range items {
			if q := unknownFieldAt(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); q != "" {
				return q
			}
		}
	}
	return ""
}

// jsonFields maps the JSON names of t's fields to their types, with the
// fields of untagged embedded structs promoted, as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && tag == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				if _, shadowed := out[k]; !shadowed {
					out[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
