package engine

import "github.com/warden-ai/warden/internal/lora"

// Adapter is a LoRA adapter in the form one Backend computes with, made
// by that backend's PrepareAdapter. A Request and its Chunks carry it; nil
// is the base model. A backend refuses an Adapter another backend made.
type Adapter interface {
	// Hash is the adapter's content hash (lora.Hash). The engine runs a
	// request only when it equals the request's Owner.Adapter, so the KV
	// a request writes is tagged with the adapter it was computed under.
	Hash() string
	// Bytes is the memory the prepared form holds.
	Bytes() int64
}

// AdapterBackend is a Backend that serves LoRA adapters: in one Forward
// batch, chunks under different adapters and the base model, each with
// the result it gets alone (the Backend contract).
type AdapterBackend interface {
	Backend
	// PrepareAdapter converts a parsed adapter (checked against the
	// served model) into the backend's form.
	PrepareAdapter(a *lora.Adapter) (Adapter, error)
}

// adapterHash is a's hash, "" for the base model.
func adapterHash(a Adapter) string {
	if a == nil {
		return ""
	}
	return a.Hash()
}
