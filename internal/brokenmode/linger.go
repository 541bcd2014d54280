package brokenmode

import "time"

// WriterLinger bounds how long the aborted writer of ReleaseWithoutDrain
// goes on writing into the pages it was not drained from: at activation
// by the next request that holds one, and over that request's decode
// until the pages are let go, at most this long. It is a constant in
// every build; only a warden_broken build ever starts such a writer.
const WriterLinger = 30 * time.Second
