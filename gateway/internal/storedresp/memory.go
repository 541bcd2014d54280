package storedresp

import (
	"context"
	"sync"
	"time"
)

// Memory is a Backend in this process's memory, for a single gateway
// (tenants.store: memory) and tests.
type Memory struct {
	now     func() time.Time
	mu      sync.Mutex
	tenants map[string]*memTenant
}

var _ Backend = (*Memory)(nil)

type memTenant struct {
	records map[string]memRecord
	order   []string // ids, oldest first (may hold removed ones)
	bytes   int64
}

type memRecord struct {
	blob    []byte
	expires time.Time
}

// NewMemory returns an empty Memory backend; now is its clock (nil:
// time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, tenants: map[string]*memTenant{}}
}

// Put implements Backend.
func (m *Memory) Put(_ context.Context, tenant, id string, blob []byte, ttl time.Duration, maxBytes int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tenants[tenant]
	if t == nil {
		t = &memTenant{records: map[string]memRecord{}}
		m.tenants[tenant] = t
	}
	t.remove(id)
	t.records[id] = memRecord{blob: blob, expires: m.now().Add(ttl)}
	t.order = append(t.order, id)
	t.bytes += int64(len(blob))
	now := m.now()
	for len(t.order) > 0 && t.bytes > maxBytes {
		t.remove(t.order[0])
	}
	// Expired records leave the bound's count as they are found.
	for len(t.order) > 0 {
		r, ok := t.records[t.order[0]]
		if ok && r.expires.After(now) {
			break
		}
		t.remove(t.order[0])
	}
	return nil
}

// Get implements Backend.
func (m *Memory) Get(_ context.Context, tenant, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tenants[tenant]
	if t == nil {
		return nil, ErrNotFound
	}
	r, ok := t.records[id]
	if !ok || !r.expires.After(m.now()) {
		return nil, ErrNotFound
	}
	return r.blob, nil
}

// Delete implements Backend.
func (m *Memory) Delete(_ context.Context, tenant, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tenants[tenant]
	if t == nil {
		return ErrNotFound
	}
	if _, ok := t.records[id]; !ok {
		return ErrNotFound
	}
	t.remove(id)
	return nil
}

// DeleteTenant implements Backend.
func (m *Memory) DeleteTenant(_ context.Context, tenant string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tenants, tenant)
	return nil
}

// remove drops id's record and its place in the order.
func (t *memTenant) remove(id string) {
	if r, ok := t.records[id]; ok {
		t.bytes -= int64(len(r.blob))
		delete(t.records, id)
	}
	for i, o := range t.order {
		if o == id {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
}
