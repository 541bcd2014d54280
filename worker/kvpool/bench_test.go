package kvpool_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/warden-ai/warden/worker/kvpool"
)

// Benchmark page shape: 16 tokens × K,V × 4 layers × 128 floats (64 KiB),
// a small model's page. Larger models only make the data baselines slower.
const (
	benchPageTokens = 16
	benchPageBytes  = benchPageTokens * 2 * 4 * 128 * 4
)

// verifiedPool returns a pool holding one fully written sequence of n pages.
func verifiedPool(b *testing.B, n int) (*kvpool.Pool, []kvpool.PageID) {
	p := newPool(b, kvpool.Config{Pages: n, PageTokens: benchPageTokens, PageBytes: benchPageBytes})
	pages := reserve(b, p, alice1, n*benchPageTokens)
	if err := p.MarkTokensWritten(alice1, pages, n*benchPageTokens); err != nil {
		b.Fatal(err)
	}
	return p, pages
}

// BenchmarkVerify measures the per-step read check for sequences of 1, 64
// and 4096 pages; compare with BenchmarkReadKV, one pass over the same KV.
func BenchmarkVerify(b *testing.B) {
	for _, n := range []int{1, 64, 4096} {
		b.Run(fmt.Sprintf("pages=%d", n), func(b *testing.B) {
			p := newPool(b, kvpool.Config{Pages: n, PageTokens: benchPageTokens, PageBytes: 1})
			pages := reserve(b, p, alice1, n*benchPageTokens)
			if err := p.MarkTokensWritten(alice1, pages, n*benchPageTokens); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Verify(alice1, pages, n*benchPageTokens); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyParallel runs the 64-page check from every P at once (a
// batch of sequences verified concurrently share the pool's mutex).
func BenchmarkVerifyParallel(b *testing.B) {
	p := newPool(b, kvpool.Config{Pages: 64, PageTokens: benchPageTokens, PageBytes: 1})
	pages := reserve(b, p, alice1, 64*benchPageTokens)
	if err := p.MarkTokensWritten(alice1, pages, 64*benchPageTokens); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.Verify(alice1, pages, 64*benchPageTokens); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReadKV is the baseline for BenchmarkVerify/pages=64: one pass
// over the 4 MiB of KV a 64-page sequence holds, which a decode step reads
// at least once.
func BenchmarkReadKV(b *testing.B) {
	p, pages := verifiedPool(b, 64)
	b.SetBytes(int64(len(pages)) * benchPageBytes)
	var sink uint64
	for b.Loop() {
		for _, id := range pages {
			d := p.Data(id)
			for i := 0; i+8 <= len(d); i += 8 {
				sink += binary.LittleEndian.Uint64(d[i:])
			}
		}
	}
	if sink == 1 {
		b.Log(sink)
	}
}

// BenchmarkReserveRelease reserves and releases a 64-page sequence.
func BenchmarkReserveRelease(b *testing.B) {
	p := newPool(b, kvpool.Config{Pages: 256, PageTokens: benchPageTokens, PageBytes: 1})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Reserve(alice1, 64*benchPageTokens); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Release(alice1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWritePage copies one whole page in through the fence; compare
// with BenchmarkCopyPage, the bare copy.
func BenchmarkWritePage(b *testing.B) {
	p, pages := verifiedPool(b, 1)
	src := make([]byte, benchPageBytes)
	b.SetBytes(benchPageBytes)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.WritePage(alice1, pages[0], 0, src, benchPageTokens); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyPage is the baseline for BenchmarkWritePage.
func BenchmarkCopyPage(b *testing.B) {
	p, pages := verifiedPool(b, 1)
	src := make([]byte, benchPageBytes)
	b.SetBytes(benchPageBytes)
	for b.Loop() {
		copy(p.Data(pages[0]), src)
	}
}
