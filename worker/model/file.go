package model

import (
	"errors"
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// File is an open safetensors file, memory-mapped read-only. Its tensors'
// Data alias the mapping and become invalid after Close.
type File struct {
	// Path is the file's path as given to OpenSafetensors.
	Path string
	// Metadata is the header's __metadata__ map (nil when absent).
	Metadata map[string]string

	tensors []*Tensor // in data order
	byName  map[string]*Tensor
	mapping []byte
}

// OpenSafetensors maps path read-only and validates its header; no tensor
// bytes are read or copied. The mapping is shared with the page cache, so
// the file must not be truncated or rewritten in place while open (write
// a new file and rename it instead, as WriteSafetensors does).
func OpenSafetensors(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	defer fd.Close() // the mapping outlives the descriptor
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("model: %s is not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		// Too short for a header; also avoids mapping an empty file.
		return nil, fmt.Errorf("model: %s: %w", path, invalidf("file is %d bytes, shorter than the 8-byte header length (truncated)", size))
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("model: %s: file of %d bytes cannot be mapped", path, size)
	}
	mapping, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("model: mapping %s: %w", path, err)
	}
	tensors, metadata, err := ParseSafetensors(mapping)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("model: %s: %w", path, err), unix.Munmap(mapping))
	}
	f := &File{Path: path, Metadata: metadata, tensors: tensors, byName: make(map[string]*Tensor, len(tensors)), mapping: mapping}
	for _, t := range tensors {
		f.byName[t.Name] = t
	}
	return f, nil
}

// Tensors returns the file's tensors in data order.
func (f *File) Tensors() []*Tensor { return f.tensors }

// Tensor returns the named tensor, or nil.
func (f *File) Tensor(name string) *Tensor { return f.byName[name] }

// Close unmaps the file. Tensors from it must not be used afterwards.
// Closing twice is a no-op.
func (f *File) Close() error {
	if f.mapping == nil {
		return nil
	}
	err := unix.Munmap(f.mapping)
	f.mapping, f.tensors, f.byName = nil, nil, nil
	if err != nil {
		return fmt.Errorf("model: unmapping %s: %w", f.Path, err)
	}
	return nil
}
