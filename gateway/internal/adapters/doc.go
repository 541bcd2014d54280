// Package adapters is the gateway's LoRA adapter registry (issue 32).
//
// An adapter is registered for a served base model through the admin
// API: its PEFT files (adapter_config.json, adapter_model.safetensors)
// are checked with internal/lora.Parse against the base model's shape
// (which the model's workers report with their assets, ModelShape) and
// stored in the tenant store (tenant.AdapterStore) as a tenant-owned
// record, "<base>:<name>", naming content-addressed files. Only its owner
// and the tenants it is shared with may use it: for anyone else Resolve
// answers ErrNotFound, which the gateway serves exactly as a model that
// does not exist.
//
// Workers load adapters on demand: a worker that does not hold a
// request's adapter refuses the call with FAILED_PRECONDITION "adapter
// not loaded: <hash>" (controlpb.IsAdapterNotLoaded), and the gateway pushes the files with
// LoadAdapter (Push) and calls once more (Retry). A worker without room
// for it refuses the load with RESOURCE_EXHAUSTED (ErrNoRoom).
package adapters
