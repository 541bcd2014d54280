// Package controlpb holds the gRPC control-plane protocol between the
// gateway and the workers (see control.proto).
package controlpb

//go:generate ../../scripts/gen-proto.sh
