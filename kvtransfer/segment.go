package kvtransfer

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Segment is a shared-memory KV slab for the shm backend. Decode creates
// it (CreateSegment) and hands Data() to its KV pool; prefill maps the same
// file (OpenSegment) and writes pages into it directly.
//
// File layout (little-endian):
//
//	[0, 4096)            segment header (magic, version, geometry, segment ID)
//	[4096, 4096+128*N)   one 128-byte page header per page
//	[dataOffset, end)    N pages of PageBytes each; dataOffset is 2 MiB-aligned
//
// A page header records who last wrote the page: the owner tag (tenant,
// request and LoRA adapter hashes), epoch, transfer ID, bytes written and the page
// checksum, and a seal word. The sender fills it after the page's data and
// stores the seal last (atomically, a release): a seal matching the
// transfer and epoch says the page is complete and will not be written
// again by that transfer, so the receiver may verify it while later pages
// are still being written. The receiver checks the header, and recomputes
// the checksum over the data, before it accepts.
//
// The data region is aligned to 2 MiB and advised for transparent huge
// pages where the platform allows it: pages of a transfer are scattered
// over the slab, and with 4 KiB mappings every page costs TLB misses.
type Segment struct {
	path      string
	mem       []byte
	headers   []byte
	data      []byte
	pages     int
	pageBytes int
	id        [16]byte
	created   bool
	// writer (OpenSegment) holds a shared flock on the segment file for
	// as long as the mapping exists; see WritersAttached.
	writer    *os.File
	closeOnce sync.Once
	closeErr  error
}

const (
	segMagic        = "WARDENKV"
	segVersion      = 2
	segHeaderSize   = 4096
	pageHeaderSize  = 128
	pageHeaderMagic = 0x48504b57 // "WKPH"
	// pageHeaderVersion 3 added the adapter to the owner tag.
	pageHeaderVersion = 3
	// sealOffset is where a page header's seal word sits (8-byte aligned).
	sealOffset = 80
	// dataAlign aligns the data region for huge pages.
	dataAlign = 2 << 20
	// maxSegmentSize bounds what OpenSegment maps (1 TiB).
	maxSegmentSize = 1 << 40
)

// segLayout is the geometry of a segment.
type segLayout struct {
	pages      int
	pageBytes  int
	dataOffset int
	size       int
	id         [16]byte
}

func newLayout(pages, pageBytes int) (segLayout, error) {
	if pages <= 0 || pageBytes <= 0 || pageBytes > MaxPageBytes {
		return segLayout{}, fmt.Errorf("%w: %d pages of %d bytes", ErrSegment, pages, pageBytes)
	}
	hdrEnd := segHeaderSize + pages*pageHeaderSize
	dataOffset := (hdrEnd + dataAlign - 1) &^ (dataAlign - 1)
	if pages > (maxSegmentSize-dataOffset)/pageBytes {
		return segLayout{}, fmt.Errorf("%w: %d pages of %d bytes exceed %d bytes", ErrSegment, pages, pageBytes, maxSegmentSize)
	}
	return segLayout{pages: pages, pageBytes: pageBytes, dataOffset: dataOffset, size: dataOffset + pages*pageBytes}, nil
}

func (l *segLayout) marshal(b []byte) {
	copy(b[0:8], segMagic)
	binary.LittleEndian.PutUint32(b[8:], segVersion)
	binary.LittleEndian.PutUint32(b[12:], pageHeaderSize)
	binary.LittleEndian.PutUint64(b[16:], uint64(l.pages))
	binary.LittleEndian.PutUint64(b[24:], uint64(l.pageBytes))
	binary.LittleEndian.PutUint64(b[32:], uint64(l.dataOffset))
	binary.LittleEndian.PutUint64(b[40:], uint64(l.size))
	copy(b[48:64], l.id[:])
}

// parseLayout decodes and checks a segment header read from a file of
// fileSize bytes; the file is untrusted until this passes.
func parseLayout(b []byte, fileSize int64) (segLayout, error) {
	var l segLayout
	if len(b) < 64 || string(b[0:8]) != segMagic {
		return l, fmt.Errorf("%w: bad segment header", ErrSegment)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != segVersion {
		return l, fmt.Errorf("%w: segment version %d", ErrSegment, v)
	}
	if h := binary.LittleEndian.Uint32(b[12:]); h != pageHeaderSize {
		return l, fmt.Errorf("%w: page header size %d", ErrSegment, h)
	}
	pages := binary.LittleEndian.Uint64(b[16:])
	pageBytes := binary.LittleEndian.Uint64(b[24:])
	if pages == 0 || pages > maxSegmentSize || pageBytes == 0 || pageBytes > MaxPageBytes {
		return l, fmt.Errorf("%w: geometry %d x %d", ErrSegment, pages, pageBytes)
	}
	want, err := newLayout(int(pages), int(pageBytes))
	if err != nil {
		return l, err
	}
	if binary.LittleEndian.Uint64(b[32:]) != uint64(want.dataOffset) ||
		binary.LittleEndian.Uint64(b[40:]) != uint64(want.size) || int64(want.size) != fileSize {
		return l, fmt.Errorf("%w: inconsistent geometry (file %d bytes)", ErrSegment, fileSize)
	}
	copy(want.id[:], b[48:64])
	return want, nil
}

func (s *Segment) init(l segLayout) {
	s.pages, s.pageBytes, s.id = l.pages, l.pageBytes, l.id
	s.headers = s.mem[segHeaderSize : segHeaderSize+l.pages*pageHeaderSize : segHeaderSize+l.pages*pageHeaderSize]
	s.data = s.mem[l.dataOffset:l.size:l.size]
}

// Data is the data region: Pages() pages of PageBytes() bytes, 2 MiB
// aligned in the file. Decode's KV pool uses it as its slab.
func (s *Segment) Data() []byte { return s.data }

// Page returns page id's bytes.
func (s *Segment) Page(id int32) []byte {
	off := int(id) * s.pageBytes
	return s.data[off : off+s.pageBytes : off+s.pageBytes]
}

// Pages is the number of pages.
func (s *Segment) Pages() int { return s.pages }

// PageBytes is the size of one page.
func (s *Segment) PageBytes() int { return s.pageBytes }

// ID is the random identity decode gave the segment at creation; the
// handshake sends it so prefill never writes into a stale mapping.
func (s *Segment) ID() [16]byte { return s.id }

// Path is the segment's file.
func (s *Segment) Path() string { return s.path }

// Close unmaps the segment; the creator also removes the file. Slices
// from Data and Page must not be used afterwards.
func (s *Segment) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.unmap() })
	return s.closeErr
}

// pageHeader is the owner record of one page in a segment.
type pageHeader struct {
	epoch      uint64
	transferID TransferID
	tag        ownerTag
	written    uint64
	checksum   uint64
	seal       uint64
}

// sealOf is the seal word of a page completed by transfer id at epoch.
// It is never 0, the word of a header nobody sealed.
func sealOf(id TransferID, epoch uint64) uint64 {
	s := binary.LittleEndian.Uint64(id[:8]) ^ binary.LittleEndian.Uint64(id[8:]) ^ epoch*0x9e3779b97f4a7c15
	return s | 1
}

// ownerTag identifies an owner but its epoch in a fixed size: truncated
// SHA-256 of the tenant, of tenant and request (so equal request IDs of
// different tenants differ), and of the LoRA adapter's content hash (KV
// computed under one adapter is another owner's under another adapter or
// the base model, DESIGN I8a). It is what shm page headers and the Hello
// carry (wire.OwnerTagSize bytes).
type ownerTag struct {
	tenant  [16]byte
	request [16]byte
	adapter [16]byte
}

func tagOf(o Owner) ownerTag {
	var t ownerTag
	h := sha256.New()
	h.Write([]byte("warden-kv tenant\x00"))
	h.Write([]byte(o.Tenant))
	copy(t.tenant[:], h.Sum(nil))
	h.Reset()
	h.Write([]byte("warden-kv request\x00"))
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(o.Tenant))))
	h.Write([]byte(o.Tenant))
	h.Write([]byte(o.Request))
	copy(t.request[:], h.Sum(nil))
	h.Reset()
	h.Write([]byte("warden-kv adapter\x00"))
	h.Write([]byte(o.Adapter))
	copy(t.adapter[:], h.Sum(nil))
	return t
}

func (s *Segment) pageHeaderBytes(id int32) []byte {
	off := int(id) * pageHeaderSize
	return s.headers[off : off+pageHeaderSize]
}

// sealWord is page id's seal word, read and written atomically.
func (s *Segment) sealWord(id int32) *uint64 {
	return (*uint64)(unsafe.Pointer(&s.pageHeaderBytes(id)[sealOffset]))
}

// sealPage stores page id's seal word after its data and header fields
// (a release: a reader that loads the seal sees them).
func (s *Segment) sealPage(id int32, seal uint64) { atomic.StoreUint64(s.sealWord(id), seal) }

// sealed reports whether page id carries seal (an acquire).
func (s *Segment) sealed(id int32, seal uint64) bool {
	return atomic.LoadUint64(s.sealWord(id)) == seal
}

// writePageHeader writes every field of page id's header but the seal.
func (s *Segment) writePageHeader(id int32, h *pageHeader) {
	b := s.pageHeaderBytes(id)
	binary.LittleEndian.PutUint32(b[0:], pageHeaderMagic)
	binary.LittleEndian.PutUint32(b[4:], pageHeaderVersion)
	binary.LittleEndian.PutUint64(b[8:], h.epoch)
	copy(b[16:32], h.transferID[:])
	copy(b[32:48], h.tag.tenant[:])
	copy(b[48:64], h.tag.request[:])
	binary.LittleEndian.PutUint64(b[64:], h.written)
	binary.LittleEndian.PutUint64(b[72:], h.checksum)
	copy(b[88:104], h.tag.adapter[:]) // after the seal word at 80
}

// readPageHeader decodes a page header; ok is false when the page was never
// written by this protocol version.
func readPageHeader(b []byte) (h pageHeader, ok bool) {
	if len(b) < pageHeaderSize ||
		binary.LittleEndian.Uint32(b[0:]) != pageHeaderMagic ||
		binary.LittleEndian.Uint32(b[4:]) != pageHeaderVersion {
		return h, false
	}
	h.epoch = binary.LittleEndian.Uint64(b[8:])
	copy(h.transferID[:], b[16:32])
	copy(h.tag.tenant[:], b[32:48])
	copy(h.tag.request[:], b[48:64])
	h.written = binary.LittleEndian.Uint64(b[64:])
	h.checksum = binary.LittleEndian.Uint64(b[72:])
	copy(h.tag.adapter[:], b[88:104])
	h.seal = binary.NativeEndian.Uint64(b[sealOffset:]) // stored atomically, in native order
	return h, true
}
