package cli

import (
	"fmt"
	"net"
)

// portPicker hands out free loopback ports. It keeps every port it picked,
// and every pinned address it checked, bound until it is released, so
// that no two collide. The ports picked while owner names a process are
// that process's: takeFor hands their sockets over when it starts, and
// the process listens on them as they are (listenfd), so no other
// program on the machine can take one in between.
type portPicker struct {
	held []heldPort
	// pinned are the pinned addresses held (hold).
	pinned map[string]bool
	// owner is the process the ports picked now are for ("": released
	// by release only).
	owner string
}

// heldPort is a bound port and the process it is for.
type heldPort struct {
	ln    *net.TCPListener
	owner string
}

// pick returns host:port with a port that is free on host now.
func (pp *portPicker) pick(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	pp.held = append(pp.held, heldPort{ln.(*net.TCPListener), pp.owner})
	return ln.Addr().String(), nil
}

// resolve returns addr when it is pinned with a port (after checking that
// the port is free, field naming the config setting that pins it), and
// otherwise a free port: on addr's host when addr names one, else on
// loopback.
func (pp *portPicker) resolve(addr string, pinned bool, field string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if pinned && err == nil && port != "0" {
		return addr, pp.hold(addr, fmt.Sprintf("change %s in the config, or remove it to have a free port picked", field))
	}
	if !pinned || err != nil || host == "" {
		host = "127.0.0.1"
	}
	return pp.pick(host)
}

// hold binds the pinned address addr until release, once however often
// it is asked, so that `warden up` reports an address in use (with hint,
// what to change) before it starts any process, and no port it picks
// afterwards is one a pinned address needs.
func (pp *portPicker) hold(addr, hint string) error {
	if pp.pinned[addr] {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is not free (%w): %s", addr, err, hint)
	}
	if pp.pinned == nil {
		pp.pinned = map[string]bool{}
	}
	pp.pinned[addr] = true
	pp.held = append(pp.held, heldPort{ln.(*net.TCPListener), ""})
	return nil
}

// takeFor removes the ports picked for owner from the picker and returns
// their listeners (still bound), for the caller to hand to owner's
// process and then close.
func (pp *portPicker) takeFor(owner string) []*net.TCPListener {
	var taken []*net.TCPListener
	kept := pp.held[:0]
	for _, h := range pp.held {
		if h.owner == owner {
			taken = append(taken, h.ln)
		} else {
			kept = append(kept, h)
		}
	}
	pp.held = kept
	return taken
}

// releaseFor unbinds the ports picked for owner.
func (pp *portPicker) releaseFor(owner string) {
	for _, ln := range pp.takeFor(owner) {
		_ = ln.Close()
	}
}

// release unbinds every port still held.
func (pp *portPicker) release() {
	for _, h := range pp.held {
		_ = h.ln.Close()
	}
	pp.held, pp.pinned = nil, nil
}

// dialAddr turns a listen address into one to dial: a wildcard host
// becomes loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}
