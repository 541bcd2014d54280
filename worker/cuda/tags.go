//go:build cuda

package cuda

import (
	"hash/maphash"
	"sync"

	"github.com/warden-ai/warden/worker/kvpool"
)

// tagMirror is the host's copy of the device page tags (owned pages:
// owner; sealed pages: prefix tag): what the device holds once the pending
// updates are applied. The backend refreshes it from
// the pool's metadata for every page a step or a page copy touches, and
// uploads the entries that changed before the next step's kernels run.
//
// It is safe for concurrent use (forward steps and page copies).
type tagMirror struct {
	mu   sync.Mutex
	seed maphash.Seed
	// owners[id] is the owner the page's bytes last belonged to: the owner
	// tags[id] was computed for, or the zero Owner once the page was seen
	// sealed (the sealed bytes belong to no owner, so whoever reserves the
	// page next gets it filled).
	owners []kvpool.Owner
	tags   []devTag
	// dirty lists the pages whose tag changed since the last drain.
	dirty   []kvpool.PageID
	isDirty []bool
}

// newTagMirror returns a mirror of pages free pages and their tags, which
// the device must be given (initial) before its first step.
func newTagMirror(pages int) (m *tagMirror, initial []devTag) {
	m = &tagMirror{
		seed:    maphash.MakeSeed(),
		owners:  make([]kvpool.Owner, pages),
		tags:    make([]devTag, pages),
		isDirty: make([]bool, pages),
	}
	free := devTag{Hash: m.hash(kvpool.Owner{})}
	for i := range m.tags {
		m.tags[i] = free
	}
	return m, m.tags
}

// ownerKey is what the tag hash covers; the epoch is compared on its own.
// The adapter is part of the owner (DESIGN I8a): a page written under one
// LoRA adapter is foreign to the same request under another.
type ownerKey struct{ tenant, request, adapter string }

// hash is the keyed 64-bit hash of owner's tenant, request and adapter.
// The seed is random per backend, so no client can aim for a collision.
func (m *tagMirror) hash(o kvpool.Owner) uint64 {
	return maphash.Comparable(m.seed, ownerKey{o.Tenant, o.Request, o.Adapter})
}

// sealedHashes are the keyed hashes of a sealed page's prefix tag and of
// its cache domain alone: what its device tag holds, and what a chunk
// presents for a page it shares. The domain's hash lets the device tell a
// foreign domain from a mismatched chain hash, as the pool does.
func (m *tagMirror) sealedHashes(t kvpool.Tag) (tag, domain uint64) {
	return maphash.Comparable(m.seed, t), maphash.Comparable(m.seed, t.Domain)
}

// observe records page id's host metadata and reports whether the page
// changed owner (tenant, request or epoch) since the mirror last saw it —
// the moment its old bytes stop belonging to anyone. Sealing a page keeps
// its bytes (ownerChanged is false), and the next owner after a sealed
// page is a change. Hold m.mu.
func (m *tagMirror) observe(id kvpool.PageID, info kvpool.PageInfo) (ownerChanged bool) {
	t := m.tags[id]
	if info.State == kvpool.Sealed {
		m.owners[id] = kvpool.Owner{}
		t.Hash, t.Epoch = m.sealedHashes(info.Tag)
		t.State = tagSealed
	} else {
		if info.Owner != m.owners[id] {
			m.owners[id] = info.Owner
			ownerChanged = true
		}
		if ownerChanged || t.State == tagSealed {
			t.Hash = m.hash(info.Owner)
		}
		t.Epoch = info.Owner.Epoch
		t.State = tagUnreadable
		if info.State == kvpool.Reserved || info.State == kvpool.InUse {
			t.State = tagOwned
		}
	}
	t.Written = int32(info.Written)
	if t != m.tags[id] {
		m.tags[id] = t
		if !m.isDirty[id] {
			m.isDirty[id] = true
			m.dirty = append(m.dirty, id)
		}
	}
	return ownerChanged
}

// drain appends the pending updates to ids and tags and clears them. Hold
// m.mu.
func (m *tagMirror) drain(ids []int32, tags []devTag) ([]int32, []devTag) {
	for _, id := range m.dirty {
		ids = append(ids, int32(id))
		tags = append(tags, m.tags[id])
		m.isDirty[id] = false
	}
	m.dirty = m.dirty[:0]
	return ids, tags
}
