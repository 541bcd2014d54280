//go:build unix

package kvtransfer

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// CreateSegment creates the shared-memory file at path (mode 0600, any
// stale file there is replaced) sized for pages pages of pageBytes bytes,
// maps it shared read-write and writes its header with a fresh random ID.
// Decode calls it at start-up; Close unmaps and removes the file.
func CreateSegment(path string, pages, pageBytes int) (*Segment, error) {
	l, err := newLayout(pages, pageBytes)
	if err != nil {
		return nil, err
	}
	rand.Read(l.id[:])
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: remove stale %s: %w", ErrSegment, path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: create: %w", ErrSegment, err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fail := func(err error) (*Segment, error) {
		os.Remove(path)
		return nil, fmt.Errorf("%w: create %s: %w", ErrSegment, path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if err := f.Truncate(int64(l.size)); err != nil {
		return fail(err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, l.size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fail(err)
	}
	adviseHugePages(mem[l.dataOffset:])
	s := &Segment{path: path, mem: mem, created: true}
	l.marshal(mem[:segHeaderSize])
	s.init(l)
	return s, nil
}

// OpenSegment maps an existing segment read-write (prefill). The file
// must be a regular file owned by this user with no group or other
// permissions, and its header must describe exactly its size.
func OpenSegment(path string) (*Segment, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open: %w", ErrSegment, err)
	}
	mapped := false
	defer func() {
		if !mapped {
			f.Close()
		}
	}()
	// The writer's lock: held until Close unmapped the segment, and let go
	// by the kernel when the process dies (after its mappings are gone).
	// Decode reclaims quarantined pages only while nobody holds it.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		return nil, fmt.Errorf("%w: lock: %w", ErrSegment, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: stat: %w", ErrSegment, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is not a private regular file of this user", ErrSegment, path)
	}
	var hdr [64]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: read header: %w", ErrSegment, err)
	}
	l, err := parseLayout(hdr[:], fi.Size())
	if err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, l.size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap: %w", ErrSegment, err)
	}
	adviseHugePages(mem[l.dataOffset:])
	s := &Segment{path: path, mem: mem, writer: f}
	mapped = true
	s.init(l)
	return s, nil
}

// WritersAttached reports whether some process may still have the segment
// mapped through OpenSegment (a prefill sender, alive or stalled): it
// holds the writer lock, shared, from before it maps the segment until
// after it unmapped it, and the kernel lets go of it only once a dead
// process's mappings are gone. False proves that every writer that had
// the segment mapped can write no more: none is attached now, and one
// that attaches later writes only pages of a transfer decode accepts
// after the handshake, never pages an earlier transfer left quarantined.
// Decode calls it (the creator holds no writer lock).
func (s *Segment) WritersAttached() (bool, error) {
	f, err := os.OpenFile(s.path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return true, fmt.Errorf("%w: open: %w", ErrSegment, err)
	}
	defer f.Close()
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return true, fmt.Errorf("%w: lock: %w", ErrSegment, err)
	}
	return false, nil // closing f lets go of the lock
}

func (s *Segment) unmap() error {
	err := syscall.Munmap(s.mem)
	if s.writer != nil {
		err = errors.Join(err, s.writer.Close()) // after the unmap: lets go of the writer lock
	}
	if s.created && s.fileIsOurs() {
		if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// fileIsOurs reports whether the file at s.path is still this segment, so
// Close never removes a segment a newer process created at the same path.
func (s *Segment) fileIsOurs() bool {
	f, err := os.Open(s.path)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [64]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return false
	}
	return string(hdr[0:8]) == segMagic && [16]byte(hdr[48:64]) == s.id
}
