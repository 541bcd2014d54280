package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the field path, e.g. "models[0].context_length", or an
	// environment variable name for an override that does not parse.
	Path string
	// Line is the line in the YAML file, when known (0 otherwise).
	Line int
	// Reason says what is wrong, e.g. "must be > 0 (got -5)".
	Reason string
}

// String renders "path: reason" or "path (line N): reason".
func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", p.Path, p.Line, p.Reason)
	}
	return p.Path + ": " + p.Reason
}

// ValidationError lists every problem found in one pass, so that an
// operator fixes a file once rather than once per error.
type ValidationError struct {
	Problems []Problem
}

// Error renders one problem per line.
func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}
