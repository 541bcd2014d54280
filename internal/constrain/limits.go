package constrain

import "fmt"

// Limits are the bounds a worker puts on the constraints it accepts. A
// worker advertises them when it registers; the gateway checks every
// request's constraint against the smallest of its model's workers, with
// the same code the worker runs ([Limits.Accept]), so that a worker never
// refuses a constraint the gateway let through. A zero field is the
// default (see [Limits.Or]).
type Limits struct {
	// SpecBytes bounds a spec's wire form ([Spec.Encode]).
	SpecBytes int
	// RegexBytes bounds Spec.Regex.
	RegexBytes int
	// Choices bounds Spec.Choice.
	Choices int
	// Insts bounds the compiled grammar's automaton instructions.
	Insts int
}

// DefaultLimits are this version's limits: what Compile enforces, what a
// worker advertises, and what the gateway assumes for a worker that
// advertises none.
var DefaultLimits = Limits{SpecBytes: MaxSpecBytes, RegexBytes: MaxRegexBytes, Choices: MaxChoices, Insts: MaxInsts}

// Or returns l with each field that is not positive taken from def.
func (l Limits) Or(def Limits) Limits {
	pick := func(a, b int) int {
		if a > 0 {
			return a
		}
		return b
	}
	return Limits{SpecBytes: pick(l.SpecBytes, def.SpecBytes), RegexBytes: pick(l.RegexBytes, def.RegexBytes),
		Choices: pick(l.Choices, def.Choices), Insts: pick(l.Insts, def.Insts)}
}

// Min returns the smaller of l and o, field by field.
func (l Limits) Min(o Limits) Limits {
	return Limits{SpecBytes: min(l.SpecBytes, o.SpecBytes), RegexBytes: min(l.RegexBytes, o.RegexBytes),
		Choices: min(l.Choices, o.Choices), Insts: min(l.Insts, o.Insts)}
}

// LimitError reports a constraint over one of the Limits; errors.Is(err,
// ErrTooLarge) is true.
type LimitError struct {
	// Limit names the limit: "constraint size", "regex size", "choices"
	// or "grammar instructions".
	Limit string
	// Size is the constraint's measure, Max the limit, both in Unit.
	Size, Max int
	Unit      string
	// AtLeast: Size is a lower bound (the measuring stopped beyond Max).
	AtLeast bool
}

// Error implements error.
func (e *LimitError) Error() string {
	more := ""
	if e.AtLeast {
		more = "more than "
	}
	return fmt.Sprintf("%s limit exceeded: %s%d %s, the limit is %d %s", e.Limit, more, e.Size, e.Unit, e.Max, e.Unit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// Accept decodes a spec's wire form and compiles it (through c, which may
// be nil), as a worker with limits l does before it runs a request: the
// error is a *LimitError for a constraint over l, else it wraps
// ErrInvalid, ErrUnsupported or ErrTooLarge.
func (l Limits) Accept(c *Cache, wire string) (*Grammar, error) {
	if len(wire) > l.SpecBytes {
		return nil, &LimitError{Limit: "constraint size", Size: len(wire), Max: l.SpecBytes, Unit: "bytes"}
	}
	spec, err := DecodeSpec(wire)
	if err != nil {
		return nil, err
	}
	if err := l.checkSpec(spec); err != nil {
		return nil, err
	}
	g, err := c.Compile(spec)
	if err != nil {
		return nil, err
	}
	if n := g.Insts(); n > l.Insts {
		return nil, &LimitError{Limit: "grammar instructions", Size: n, Max: l.Insts, Unit: "instructions"}
	}
	return g, nil
}

// checkSpec checks the limits that precede compiling.
func (l Limits) checkSpec(s Spec) error {
	if len(s.Regex) > l.RegexBytes {
		return &LimitError{Limit: "regex size", Size: len(s.Regex), Max: l.RegexBytes, Unit: "bytes"}
	}
	if len(s.Choice) > l.Choices {
		return &LimitError{Limit: "choices", Size: len(s.Choice), Max: l.Choices, Unit: "strings"}
	}
	return nil
}
