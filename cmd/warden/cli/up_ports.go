package cli

import (
	"fmt"
	"net"
)

// portPicker hands out free loopback ports. It keeps every port it picked
// bound until release, so that no two picks collide; the processes that
// use them bind them right after release.
type portPicker struct {
	held []net.Listener
}

// pick returns host:port with a port that is free on host now.
func (pp *portPicker) pick(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	pp.held = append(pp.held, ln)
	return ln.Addr().String(), nil
}

// resolve returns addr when it is pinned with a port (after checking that
// the port is free, field naming the config setting that pins it), and
// otherwise a free port: on addr's host when addr names one, else on
// loopback.
func (pp *portPicker) resolve(addr string, pinned bool, field string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if pinned && err == nil && port != "0" {
		return addr, checkFree(addr, fmt.Sprintf("change %s in the config, or remove it to have a free port picked", field))
	}
	if !pinned || err != nil || host == "" {
		host = "127.0.0.1"
	}
	return pp.pick(host)
}

// checkFree reports an error naming addr and hint when addr cannot be
// bound now, so that `warden up` says so before it starts any process.
func checkFree(addr, hint string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is not free (%w): %s", addr, err, hint)
	}
	return ln.Close()
}

// release unbinds every picked port.
func (pp *portPicker) release() {
	for _, ln := range pp.held {
		_ = ln.Close()
	}
	pp.held = nil
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
