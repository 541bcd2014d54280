package haproxyrun

import (
	"bufio"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindMissing(t *testing.T) {
	if _, err := Find(filepath.Join(t.TempDir(), "haproxy")); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("Find of a missing binary = %v, want ErrNotInstalled", err)
	}
}

// statLine is a "show stat" CSV line: pxname, svname, 15 fields, status.
func statLine(px, sv, status string) string {
	return px + "," + sv + strings.Repeat(",", 16) + status + ",x,y\n"
}

// TestAllUp reads UP and DOWN from a stats socket that answers as
// HAProxy does.
func TestAllUp(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "stats.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answers := make(chan string, 2)
	answers <- "# pxname,svname,...\n" + statLine("api", "FRONTEND", "OPEN") + statLine("gateways", "g0", "UP") +
		statLine("gateways", "g1", "DOWN") + statLine("gateways", "BACKEND", "UP")
	answers <- statLine("gateways", "g0", "UP") + statLine("gateways", "g1", "UP 1/2")
	close(answers)
	go func() {
		for a := range answers {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if line, _ := bufio.NewReader(c).ReadString('\n'); line == "show stat\n" {
				c.Write([]byte(a))
			}
			c.Close()
		}
	}()
	p := &Proxy{sock: sock, servers: 2, done: make(chan struct{})}
	if err := p.AllUp(); err == nil || !strings.Contains(err.Error(), "g1:false") {
		t.Errorf("g1 DOWN: AllUp = %v", err)
	}
	if err := p.AllUp(); err != nil {
		t.Errorf("both UP: AllUp = %v", err)
	}
}
