package listenfd

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// childEnv marks the test binary run as the child of TestPassedSocketIsTheChildsListener.
const childEnv = "LISTENFD_TEST_CHILD"

// TestMain lets the test binary act as the child: it listens on the
// address it is given and prints what it got.
func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		ln, err := Listen(addr)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		// Accept one connection: the parent dials the port it passed.
		c, err := ln.Accept()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Fprintf(c, "served %s\n", ln.Addr())
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPassedSocketIsTheChildsListener: a socket bound by the parent and
// passed with Pass is the one the child's Listen returns, so the child
// serves on the port while the parent never unbound it; a connection made
// before the child even started is accepted by it.
func TestPassedSocketIsTheChildsListener(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	// Queued in the backlog before the child exists.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	files, env, err := Pass([]*net.TCPListener{ln})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+addr, env)
	cmd.ExtraFiles = files
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	ln.Close()
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v: %s", err, out.String())
	}
	if got, want := string(buf[:n]), "served "+addr+"\n"; got != want {
		t.Fatalf("the child said %q, want %q", got, want)
	}
}

// TestListenWithoutInheritance: an address Env does not name, or a
// descriptor that is no listener on it, is bound anew.
func TestListenWithoutInheritance(t *testing.T) {
	tb := &table{fds: map[string]int{"127.0.0.1:1": 99}}
	if _, ok := tb.take("127.0.0.1:2"); ok {
		t.Fatal("took a descriptor for an address that was not passed")
	}
	if fd, ok := tb.take("127.0.0.1:1"); !ok || fd != 99 {
		t.Fatalf("take = %d, %v", fd, ok)
	}
	if _, ok := tb.take("127.0.0.1:1"); ok {
		t.Fatal("a descriptor was taken twice")
	}
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
