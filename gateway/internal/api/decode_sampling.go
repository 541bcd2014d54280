package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Bounds of the sampling controls this layer checks (the workers check the
// same: worker/engine.Sampling).
const (
	// MaxLogitBias is the most logit_bias entries a request may carry.
	MaxLogitBias = 1024
	// MaxBias bounds each logit_bias value's magnitude (OpenAI's range).
	MaxBias = 100
	// MaxRepetitionPenalty bounds repetition_penalty (vLLM sets no upper
	// bound; above 2 it already makes text incoherent).
	MaxRepetitionPenalty = 100
)

// LogitBias is one entry of logit_bias: Bias is added to the logit of
// token Token before sampling.
type LogitBias struct {
	Token int32
	Bias  float64
}

// samplingControls reads the sampling controls beyond temperature and
// top_p, with vLLM's semantics: presence_penalty, frequency_penalty,
// repetition_penalty, logit_bias, top_k and min_p (see docs/api.md).
func (d *decoder) samplingControls() *Error {
	for _, c := range []struct {
		name     string
		min, max float64
		dst      *float64
	}{
		{"presence_penalty", -2, 2, &d.r.PresencePenalty},
		{"frequency_penalty", -2, 2, &d.r.FrequencyPenalty},
		{"min_p", 0, 1, &d.r.MinP},
	} {
		raw := d.f.take(c.name)
		if raw == nil {
			continue
		}
		v, e := decodeNumber(raw, c.name)
		switch {
		case e != nil:
			return e
		case v < c.min:
			return belowMin(c.name, CodeDecimalTooSmall, c.min, v)
		case v > c.max:
			return aboveMax(c.name, CodeDecimalTooLarge, c.max, v)
		}
		*c.dst = v
	}
	if raw := d.f.take("repetition_penalty"); raw != nil {
		v, e := decodeNumber(raw, "repetition_penalty")
		switch {
		case e != nil:
			return e
		case !(v > 0):
			return InvalidRequest("repetition_penalty", CodeDecimalTooSmall, fmt.Sprintf(
				"Invalid 'repetition_penalty': value below minimum. Expected a value > 0, but got %s instead.", plain(v)))
		case v > MaxRepetitionPenalty:
			return aboveMax("repetition_penalty", CodeDecimalTooLarge, MaxRepetitionPenalty, v)
		}
		d.r.RepetitionPenalty = v
	}
	if raw := d.f.take("top_k"); raw != nil {
		// vLLM: -1 (and 0) disable top_k.
		k, e := decodeIntIn(raw, "top_k", -1, math.MaxInt32)
		if e != nil {
			return e
		}
		d.r.TopK = int(max(k, 0))
	}
	if raw := d.f.take("logit_bias"); raw != nil {
		lb, e := decodeLogitBias(raw)
		if e != nil {
			return e
		}
		d.r.LogitBias = lb
	}
	return nil
}

// decodeLogitBias reads logit_bias: an object mapping token ids (decimal
// strings, as OpenAI sends them) to biases in [-MaxBias, MaxBias], at most
// MaxLogitBias entries. The result is sorted by token; two keys naming
// the same token ("7" and "07") are refused. Whether the ids are in the
// model's vocabulary is the core's to check.
func decodeLogitBias(raw json.RawMessage) ([]LogitBias, *Error) {
	f, e := decodeObject(raw, "logit_bias")
	if e != nil {
		return nil, e
	}
	if len(f) > MaxLogitBias {
		return nil, InvalidRequest("logit_bias", CodeInvalidValue, fmt.Sprintf(
			"Invalid 'logit_bias': at most %d tokens may be biased, got %d.", MaxLogitBias, len(f)))
	}
	out := make([]LogitBias, 0, len(f))
	for key, v := range f {
		id, err := strconv.ParseUint(key, 10, 31)
		if err != nil || key == "" || key[0] == '+' {
			return nil, InvalidRequest("logit_bias", CodeInvalidValue, fmt.Sprintf(
				"Invalid 'logit_bias': keys must be token ids (non-negative integers below 2^31 written in decimal), got %q.", key))
		}
		param := "logit_bias." + key
		b, e := decodeNumber(v, param)
		switch {
		case e != nil:
			return nil, e
		case b < -MaxBias:
			return nil, belowMin(param, CodeDecimalTooSmall, -MaxBias, b)
		case b > MaxBias:
			return nil, aboveMax(param, CodeDecimalTooLarge, MaxBias, b)
		}
		out = append(out, LogitBias{Token: int32(id), Bias: b})
	}
	slices.SortFunc(out, func(a, b LogitBias) int { return cmp.Compare(a.Token, b.Token) })
	for i := 1; i < len(out); i++ {
		if out[i].Token == out[i-1].Token {
			return nil, InvalidRequest("logit_bias", CodeInvalidValue, fmt.Sprintf(
				"Invalid 'logit_bias': token %d is listed twice.", out[i].Token))
		}
	}
	return out, nil
}

// echo reads completions' echo: the prompt's text is sent before the
// completion (with logprobs, the prompt's logprobs too: promptLogprobs).
func (d *decoder) echo() *Error {
	if d.r.Kind != KindCompletion {
		return nil // chat's echo stays with checkOtherField's policy
	}
	raw := d.f.take("echo")
	if raw == nil {
		return nil
	}
	var e *Error
	d.r.Echo, e = decodeBool(raw, "echo")
	return e
}
