package brokenmode

import "time"

// WriterLinger bounds how long the aborted writer of ReleaseWithoutDrain
// keeps writing: until the pages it wrote were reused by the next
// reservation and let go again, at most this long. It is a constant in
// every build; only a warden_broken build ever starts such a writer.
const WriterLinger = 30 * time.Second
