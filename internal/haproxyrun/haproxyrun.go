package haproxyrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotInstalled is returned by Find when no haproxy binary is found.
var ErrNotInstalled = errors.New("haproxy is not installed (Debian/Ubuntu: apt-get install haproxy)")

// config runs HAProxy in TCP mode in front of the gateways: TLS goes
// through to them, and each gateway is checked with GET /readyz over TLS
// (the CA file) every 500ms, out after two failures and back after two
// passes. A connection that cannot be made is tried again on the other
// gateway.
const config = `global
    maxconn 512
    stats socket %[1]s level admin
defaults
    mode tcp
    timeout connect 2s
    timeout client 5m
    timeout server 5m
    timeout check 5s
    retries 3
    option redispatch
frontend api
    bind %[2]s
    default_backend gateways
backend gateways
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 500ms fall 2 rise 2 check check-ssl verify required ca-file %[3]s
%[4]s`

// CheckInterval is how often HAProxy checks each gateway's /readyz; a
// gateway is out of rotation after two failed checks, so a gateway's
// shutdown_delay should be a few times 2×CheckInterval.
const CheckInterval = 500 * time.Millisecond

// Find returns the haproxy binary: path when it is not empty, else
// haproxy on $PATH. It wraps ErrNotInstalled when there is none.
func Find(path string) (string, error) {
	if path == "" {
		path = "haproxy"
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	return bin, nil
}

// Options say what an HAProxy runs in front of.
type Options struct {
	// Bin is the haproxy binary (Find).
	Bin string
	// Dir receives haproxy.cfg, the stats socket and haproxy.log.
	Dir string
	// Servers are the gateways' API addresses, host:port; the servers
	// are named g0, g1, ... in that order.
	Servers []string
	// CAFile verifies the gateways' API certificates in the checks.
	CAFile string
}

// Proxy is a running HAProxy.
type Proxy struct {
	// Addr is the loopback host:port the clients dial.
	Addr string
	// LogPath is HAProxy's output.
	LogPath string
	sock    string
	cmd     *exec.Cmd
	done    chan struct{}
	servers int
}

// Start runs HAProxy in front of o.Servers on a free loopback port.
func Start(o Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	var servers strings.Builder
	for i, s := range o.Servers {
		fmt.Fprintf(&servers, "    server g%d %s\n", i, s)
	}
	p := &Proxy{Addr: addr, LogPath: filepath.Join(o.Dir, "haproxy.log"), sock: filepath.Join(o.Dir, "haproxy-stats.sock"),
		done: make(chan struct{}), servers: len(o.Servers)}
	cfg := filepath.Join(o.Dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, p.sock, addr, o.CAFile, servers.String()), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(p.LogPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p.cmd = exec.Command(o.Bin, "-db", "-f", cfg)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting haproxy: %w", err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Close stops HAProxy.
func (p *Proxy) Close() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Up reports which servers HAProxy sees UP (from "show stat" on its
// stats socket), by name: g0, g1, ...
func (p *Proxy) Up() (map[string]bool, error) {
	c, err := net.DialTimeout("unix", p.sock, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("show stat\n")); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		// pxname, svname, ..., status is the 18th field.
		if len(f) > 17 && f[0] == "gateways" && f[1] != "BACKEND" {
			out[f[1]] = strings.HasPrefix(f[17], "UP")
		}
	}
	return out, sc.Err()
}

// AllUp returns nil when HAProxy sees every server UP, else an error that
// says what it sees.
func (p *Proxy) AllUp() error {
	select {
	case <-p.done:
		return fmt.Errorf("haproxy exited; its log is %s", p.LogPath)
	default:
	}
	up, err := p.Up()
	if err != nil {
		return err
	}
	for i := range p.servers {
		if !up[fmt.Sprintf("g%d", i)] {
			return fmt.Errorf("haproxy sees servers %v", up)
		}
	}
	return nil
}

// WaitUp waits until HAProxy sees every server UP, or ctx ends.
func (p *Proxy) WaitUp(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := p.AllUp()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for haproxy to see every gateway up: %w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
