package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The helpers below read one JSON value taken from a json.RawMessage that
// encoding/json split out of an enclosing object or array: it is
// syntactically valid and carries no surrounding whitespace.

// describe names the JSON type of raw for error messages.
func describe(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || raw[0] == 'n' }

func wrongType(param, want string, raw json.RawMessage) *Error {
	return InvalidRequest(param, CodeInvalidType,
		fmt.Sprintf("Invalid type for '%s': expected %s, but got %s instead.", param, want, describe(raw)))
}

func decodeString(raw json.RawMessage, param string) (string, *Error) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", wrongType(param, "a string", raw)
	}
	// Without escapes, valid JSON string bytes are the value itself (the
	// body was checked to be UTF-8 before parsing).
	if inner := raw[1 : len(raw)-1]; !bytes.ContainsRune(inner, '\\') {
		return string(inner), nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", wrongType(param, "a string", raw)
	}
	return s, nil
}

func decodeBool(raw json.RawMessage, param string) (bool, *Error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, wrongType(param, "a boolean", raw)
}

// decodeNumber reads a JSON number. Values beyond float64 become ±Inf and
// fail the caller's range checks.
func decodeNumber(raw json.RawMessage, param string) (float64, *Error) {
	if describe(raw) != "a number" {
		return 0, wrongType(param, "a number", raw)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, wrongType(param, "a number", raw)
	}
	return f, nil
}

// decodeInt reads a JSON number that must be integral (1e3 and 10.0 are
// accepted as 1000 and 10) and fit in int64.
func decodeInt(raw json.RawMessage, param string) (int64, *Error) {
	if describe(raw) != "a number" {
		return 0, wrongType(param, "an integer", raw)
	}
	if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return v, nil
	}
	f, e := decodeNumber(raw, param)
	switch {
	case e != nil:
		return 0, e
	case f >= math.Ldexp(1, 63):
		return 0, aboveMax(param, CodeIntegerTooLarge, float64(math.MaxInt64), f)
	case f < -math.Ldexp(1, 63):
		return 0, belowMin(param, CodeIntegerTooSmall, float64(math.MinInt64), f)
	case f != math.Trunc(f):
		return 0, wrongType(param, "an integer", raw)
	}
	return int64(f), nil
}

func belowMin(param, code string, min, got float64) *Error {
	return InvalidRequest(param, code, fmt.Sprintf(
		"Invalid '%s': value below minimum. Expected a value >= %s, but got %s instead.", param, plain(min), plain(got)))
}

func aboveMax(param, code string, max, got float64) *Error {
	return InvalidRequest(param, code, fmt.Sprintf(
		"Invalid '%s': value above maximum. Expected a value <= %s, but got %s instead.", param, plain(max), plain(got)))
}

// plain formats a number for messages without an exponent for integers
// (16777216, not 1.6777216e+07); huge or tiny values keep one.
func plain(v float64) string {
	if math.Abs(v) < 1e21 && (v == math.Trunc(v) || math.Abs(v) >= 1e-6) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// decodeIntIn reads an integer in [min, max].
func decodeIntIn(raw json.RawMessage, param string, min, max int64) (int64, *Error) {
	v, e := decodeInt(raw, param)
	switch {
	case e != nil:
		return 0, e
	case v < min:
		return 0, belowMin(param, CodeIntegerTooSmall, float64(min), float64(v))
	case v > max:
		return 0, aboveMax(param, CodeIntegerTooLarge, float64(max), float64(v))
	}
	return v, nil
}

// decodeArray splits a JSON array into its elements.
func decodeArray(raw json.RawMessage, param, want string) ([]json.RawMessage, *Error) {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, wrongType(param, want, raw)
	}
	return items, nil
}

// decodeObject splits a JSON object into its fields. Duplicate keys keep
// the last value, as encoding/json does.
func decodeObject(raw json.RawMessage, param string) (fields, *Error) {
	var f fields
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &f) != nil {
		return nil, wrongType(param, "an object", raw)
	}
	return f, nil
}
