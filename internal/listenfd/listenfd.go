package listenfd

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Env is the environment variable that maps addresses to inherited
// descriptors: "host:port=fd" entries separated by commas.
const Env = "WARDEN_LISTEN_FDS"

// firstExtraFD is the descriptor of a child's first exec.Cmd.ExtraFiles
// entry (after stdin, stdout and stderr).
const firstExtraFD = 3

// Pass returns what hands lns to a child: the files to set as its
// exec.Cmd.ExtraFiles, in order, and the Env entry ("NAME=value") to add
// to its environment. The files are duplicates: the caller closes them,
// and its listeners, once the child has started.
func Pass(lns []*net.TCPListener) (files []*os.File, env string, err error) {
	entries := make([]string, 0, len(lns))
	for i, ln := range lns {
		f, err := ln.File()
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, "", fmt.Errorf("listenfd: passing %s: %w", ln.Addr(), err)
		}
		files = append(files, f)
		entries = append(entries, fmt.Sprintf("%s=%d", ln.Addr(), firstExtraFD+i))
	}
	return files, Env + "=" + strings.Join(entries, ","), nil
}

// inherited is this process's Env, parsed once; a descriptor is taken at
// most once.
var inherited = sync.OnceValue(func() *table {
	t := &table{fds: map[string]int{}}
	for _, e := range strings.Split(os.Getenv(Env), ",") {
		addr, fd, ok := strings.Cut(e, "=")
		if n, err := strconv.Atoi(fd); ok && err == nil && n >= firstExtraFD {
			t.fds[addr] = n
		}
	}
	return t
})

// table is the inherited descriptors not taken yet, by address.
type table struct {
	mu  sync.Mutex
	fds map[string]int
}

// take removes and returns the descriptor for addr, if one was passed.
func (t *table) take(addr string) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fd, ok := t.fds[addr]
	delete(t.fds, addr)
	return fd, ok
}

// Listen returns a TCP listener on addr: the socket the parent passed for
// exactly addr (Env), the first time it is asked for, or else a new one
// (net.Listen).
func Listen(addr string) (net.Listener, error) {
	if fd, ok := inherited().take(addr); ok {
		f := os.NewFile(uintptr(fd), "listener "+addr)
		ln, err := net.FileListener(f)
		f.Close() // FileListener holds its own duplicate
		if err == nil && ln.Addr().String() == addr {
			return ln, nil
		}
		if ln != nil {
			ln.Close()
		}
	}
	return net.Listen("tcp", addr)
}
