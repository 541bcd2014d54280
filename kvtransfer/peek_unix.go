//go:build unix

package kvtransfer

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// socketWatch tells whether bytes (or EOF) wait on a connection's socket
// without consuming them, and parks until they do or a time passes, so a
// goroutine can do other work (verify pages) between frames without a
// second goroutine, and without reading into a frame it cannot finish.
type socketWatch struct {
	rc  syscall.RawConn
	buf [1]byte
}

// watchSocket returns a watch on c's socket, or nil when c is not one.
func watchSocket(c net.Conn) *socketWatch {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &socketWatch{rc: rc}
}

// peek reports whether a read would not block now.
func (w *socketWatch) peek(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), w.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK && err != syscall.EINTR
}

// waitReadable parks until the socket is readable or until passes (the
// connection's read deadline is set to until), and reports whether the
// caller should read now: false only when until passed. (A closed
// connection is for the read to report.) The caller must be the
// connection's only reader.
func (w *socketWatch) waitReadable(c net.Conn, until time.Time) bool {
	c.SetReadDeadline(until)
	err := w.rc.Read(func(fd uintptr) bool { return w.peek(fd) })
	return !errors.Is(err, os.ErrDeadlineExceeded)
}
