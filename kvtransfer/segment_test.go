package kvtransfer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func TestSegmentCreateOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "warden-w1-kv")
	seg, err := CreateSegment(path, 5, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if len(seg.Data()) != 5000 || seg.Pages() != 5 || seg.PageBytes() != 1000 {
		t.Errorf("geometry %d/%d/%d", len(seg.Data()), seg.Pages(), seg.PageBytes())
	}
	if addr := uintptr(unsafe.Pointer(&seg.Data()[0])); addr%64 != 0 {
		t.Errorf("data region at %#x is not 64-byte aligned", addr)
	}
	other, err := OpenSegment(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.ID() != seg.ID() || other.Pages() != 5 || other.PageBytes() != 1000 {
		t.Fatalf("opened %v/%d/%d", other.ID(), other.Pages(), other.PageBytes())
	}
	copy(other.Page(3), bytes.Repeat([]byte{0xab}, 1000))
	if !bytes.Equal(seg.Page(3), bytes.Repeat([]byte{0xab}, 1000)) {
		t.Error("write through the other mapping not visible")
	}
	other.writePageHeader(4, &pageHeader{epoch: 2, written: 1000, checksum: 5})
	if ph, ok := readPageHeader(seg.pageHeaderBytes(4)); !ok || ph.epoch != 2 || ph.checksum != 5 || ph.seal != 0 {
		t.Errorf("page header %+v %v", ph, ok)
	}
	id := NewTransferID()
	if seal := sealOf(id, 2); seal == 0 || seal == sealOf(id, 3) || seg.sealed(4, seal) {
		t.Fatalf("seal %x: zero, epoch-independent or set before sealing", seal)
	}
	other.sealPage(4, sealOf(id, 2))
	if ph, _ := readPageHeader(seg.pageHeaderBytes(4)); !seg.sealed(4, sealOf(id, 2)) || ph.seal != sealOf(id, 2) {
		t.Errorf("seal through the other mapping not visible: %+v", ph)
	}
	if _, ok := readPageHeader(seg.pageHeaderBytes(0)); ok {
		t.Error("unwritten page header parsed")
	}
}

func TestOpenSegmentRejects(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "warden-good-kv")
	seg, err := CreateSegment(good, 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	whole, _ := os.ReadFile(good)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	for name, path := range map[string]string{
		"missing":        filepath.Join(dir, "nope"),
		"group readable": write("wide", whole, 0o640),
		"garbage":        write("garbage", bytes.Repeat([]byte{7}, 9000), 0o600),
		"truncated":      write("short", whole[:len(whole)-1], 0o600),
		"symlink":        link,
		"directory":      dir,
	} {
		if s, err := OpenSegment(path); !errors.Is(err, ErrSegment) {
			t.Errorf("%s: %v", name, err)
			if s != nil {
				s.Close()
			}
		}
	}
	for _, g := range [][2]int{{0, 10}, {10, 0}, {1, MaxPageBytes + 1}, {1 << 30, 1 << 30}} {
		if _, err := CreateSegment(filepath.Join(dir, "bad"), g[0], g[1]); !errors.Is(err, ErrSegment) {
			t.Errorf("create %v: %v", g, err)
		}
	}
}

// TestSegmentReplaced: decode restarted and recreated its segment at the
// same path. The old creator's Close must not remove the new file, and a
// sender holding the old mapping switches to the new one by ID.
func TestSegmentReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "warden-w1-kv")
	old, err := CreateSegment(path, 2, 1024)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(SenderConfig{ShmDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tk := &Ticket{ShmPath: path, Pages: []int32{1}, PageTokens: 1, PromptTokens: 1, PageBytes: 1024}
	ref1, err := s.acquireSegment(tk, old.ID())
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := CreateSegment(path, 2, 1024) // replaces the file
	if err != nil {
		t.Fatal(err)
	}
	defer renewed.Close()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("old segment's Close removed the new file: %v", err)
	}
	if _, err := s.acquireSegment(tk, [16]byte{1}); !errors.Is(err, ErrSegment) {
		t.Errorf("unknown segment id: %v", err)
	}
	ref2, err := s.acquireSegment(tk, renewed.ID())
	if err != nil {
		t.Fatal(err)
	}
	if ref2.seg.ID() != renewed.ID() || !ref1.stale {
		t.Error("sender kept the stale mapping")
	}
	s.releaseSegment(ref1)
	s.releaseSegment(ref2)
	big := *tk
	big.PageBytes = 2048
	if _, err := s.acquireSegment(&big, renewed.ID()); !errors.Is(err, ErrSegment) {
		t.Errorf("page size mismatch: %v", err)
	}
}

func TestSenderRefusesForeignShmPath(t *testing.T) {
	s, err := NewSender(SenderConfig{ShmDir: "/dev/shm"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/passwd", "/dev/shm/../etc/x", "relative", "/dev/shm/sub/x"} {
		tk := &Ticket{
			TransferID: NewTransferID(), Owner: Owner{Request: "r"}, Pages: []int32{0}, PageTokens: 1,
			PromptTokens: 1, PageBytes: 8, AuthToken: NewAuthToken(), Addr: "127.0.0.1:1", Backend: SHM, ShmPath: p,
		}
		if _, err := s.Open(context.Background(), tk); !errors.Is(err, ErrSegment) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestDevShmRoundTrip runs one transfer through a segment in /dev/shm
// itself (where the worker puts it), when the machine has one.
func TestDevShmRoundTrip(t *testing.T) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm")
	}
	path := filepath.Join("/dev/shm", "warden-test-"+NewTransferID().String()+"-kv")
	h := newHarness(t, SHM, 4, 4096, harnessOpts{segPath: path})
	seg := h.seg
	tk := h.ticket(2*16, 16, 0)
	src := h.randomPages(2)
	if _, err := h.send.Send(context.Background(), tk, slicePages(src), 32, 0); err != nil {
		t.Fatal(err)
	}
	for i, p := range tk.Pages {
		if !bytes.Equal(seg.Page(p), src[i]) {
			t.Errorf("page %d differs", i)
		}
	}
}
