package kvtransfer

// Sink is what the receiver (decode) needs from the KV pool; the worker
// adapts its pool and request table to it.
//
// Concurrency: methods are called from one goroutine per connection, so
// calls for different transfers run concurrently; calls for one transfer
// never overlap. Implementations must not call back into the Receiver
// (Lookup runs under the receiver's lock).
//
// Lifecycle: for every transfer whose handshake the receiver accepted it
// calls exactly one of Complete or Fail. By the time that call returns,
// Lookup must report the transfer as not live, so no second connection can
// claim it.
type Sink interface {
	// Lookup returns the ticket decode issued for id and whether it is
	// still live (reserved, not aborted, not finished).
	Lookup(id TransferID) (*Ticket, bool)
	// CheckWrite reports whether page may be written for t's (request,
	// epoch) right now; a non-nil error fences the write. tcp calls it
	// right before copying each frame into the page; shm calls it for every
	// page before accepting the transfer.
	CheckWrite(t *Ticket, page int32) error
	// PageData returns the page's bytes (PageBytes long), the destination
	// of tcp copies. (shm transfers write and verify the page inside the
	// receiver's Segment, which must be the pool's slab.)
	PageData(page int32) []byte
	// Written records that page now holds slots token slots written for t
	// (after every check passed). An error fails the transfer.
	Written(t *Ticket, page int32, slots int) error
	// Complete reports a transfer that arrived fully and verified.
	Complete(t *Ticket, c Completion)
	// Fail reports a transfer that did not; err wraps one of the package's
	// sentinel errors. The worker must then call Receiver.Abort to release
	// the pages (release may be deferred).
	Fail(t *Ticket, err error)
}

// Completion is what a verified transfer delivered.
type Completion struct {
	// Tokens is the prompt token count, equal to the ticket's.
	Tokens int64
	// FirstToken is the token prefill sampled from the last position.
	FirstToken int32
	// Pages is the number of pages written; Bytes their total size.
	Pages int
	Bytes int64
}
