package controlpb

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/constrain"
)

// NewConstraintLimits is the protocol form of l.
func NewConstraintLimits(l constrain.Limits) *ConstraintLimits {
	return &ConstraintLimits{SpecBytes: int64(l.SpecBytes), RegexBytes: int64(l.RegexBytes),
		Choices: int64(l.Choices), Insts: int64(l.Insts)}
}

// Limits returns the limits c advertises, each unset (or nonsensical:
// not positive) field, and all of them when c is nil, the default
// (constrain.DefaultLimits).
func (c *ConstraintLimits) Limits() constrain.Limits {
	clamp := func(v int64) int { return int(min(max(v, 0), 1<<40)) }
	return constrain.Limits{SpecBytes: clamp(c.GetSpecBytes()), RegexBytes: clamp(c.GetRegexBytes()),
		Choices: clamp(c.GetChoices()), Insts: clamp(c.GetInsts())}.Or(constrain.DefaultLimits)
}

// ConstraintField names SamplingParams.constraint in the BadRequest detail
// of a worker's refusal of a constraint.
const ConstraintField = "sampling.constraint"

// ConstraintRefused is a worker's answer to a constraint it does not
// accept (err from constrain.Limits.Accept): InvalidArgument with a
// BadRequest detail naming ConstraintField, so that the gateway answers
// the client 400 (the constraint is the client's), never 500.
func ConstraintRefused(err error) error {
	st := status.New(codes.InvalidArgument, "sampling: "+err.Error())
	if d, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: ConstraintField, Description: err.Error()},
	}}); derr == nil {
		st = d
	}
	return st.Err()
}

// ConstraintRefusal reports whether err is a worker's refusal of a
// request's constraint (ConstraintRefused), and why.
func ConstraintRefusal(err error) (reason string, ok bool) {
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		return "", false
	}
	for _, d := range st.Details() {
		if br, isBR := d.(*errdetails.BadRequest); isBR {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == ConstraintField {
					return v.GetDescription(), true
				}
			}
		}
	}
	return "", false
}
