//go:build !unix

package kvtransfer

import "fmt"

// CreateSegment is not supported on this platform.
func CreateSegment(path string, pages, pageBytes int) (*Segment, error) {
	return nil, fmt.Errorf("%w: shared memory not supported on this platform", ErrSegment)
}

// OpenSegment is not supported on this platform.
func OpenSegment(path string) (*Segment, error) {
	return nil, fmt.Errorf("%w: shared memory not supported on this platform", ErrSegment)
}

func (s *Segment) unmap() error { return nil }

// WritersAttached cannot prove that no writer is attached on this
// platform: it always reports true.
func (s *Segment) WritersAttached() (bool, error) { return true, nil }
