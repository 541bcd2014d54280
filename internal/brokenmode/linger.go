package brokenmode

import "time"

// WriterLinger bounds how long the aborted writer of ReleaseWithoutDrain
// still owes its write: until the next request that holds one of its
// pages activates it, at most this long. It is a constant in every build;
// only a warden_broken build ever owes such a write.
const WriterLinger = 30 * time.Second
