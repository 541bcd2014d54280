// Package adapters is a worker's LoRA adapter memory: the adapters the
// gateway pushed (LoadAdapter), parsed and checked against the served
// model (internal/lora), prepared in the compute backend's form, within a
// byte budget (worker.adapters.memory).
//
// A request runs under an adapter only while it holds a Handle
// (Acquire … Release), and an adapter is evicted only when no request
// holds it and it is not pinned, least recently used first; a load that
// cannot make room that way is refused (RESOURCE_EXHAUSTED) rather than
// taking an adapter from under a running request. A request naming an
// adapter the worker does not hold fails with FAILED_PRECONDITION
// "adapter not loaded: <hash>" (NotLoadedError, IsNotLoaded): the gateway
// then streams the adapter with LoadAdapter and calls again.
//
// Assemble reads a LoadAdapter stream into the adapter's two files, with
// the declared size bounded by the memory's capacity before any byte of
// the weights is buffered.
package adapters
