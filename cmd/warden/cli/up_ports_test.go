package cli

import (
	"net"
	"testing"
)

// TestPortsReleasedPerProcess: releaseFor frees only the named process's
// picked ports; the others stay bound until their turn or release.
func TestPortsReleasedPerProcess(t *testing.T) {
	var pp portPicker
	defer pp.release()
	pp.owner = "gateway"
	gw, err := pp.pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pp.owner = "worker-decode"
	wk, err := pp.pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	free := func(addr string) bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
	pp.releaseFor("gateway")
	if !free(gw) || free(wk) {
		t.Fatalf("after releasing the gateway's ports: gateway's %s free %v, worker's %s free %v; want true, false", gw, free(gw), wk, free(wk))
	}
	pp.release()
	if !free(wk) {
		t.Fatalf("the worker's port %s is still held after release", wk)
	}
}

// TestPortsTakenPerProcess: takeFor hands over the named process's picked
// ports still bound, and the picker no longer holds them.
func TestPortsTakenPerProcess(t *testing.T) {
	var pp portPicker
	defer pp.release()
	pp.owner = "gateway"
	api, err := pp.pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pp.owner = "worker-decode"
	if _, err := pp.pick("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	taken := pp.takeFor("gateway")
	if len(taken) != 1 || taken[0].Addr().String() != api {
		t.Fatalf("takeFor(gateway) = %v, want the listener on %s", taken, api)
	}
	defer taken[0].Close()
	if again := pp.takeFor("gateway"); len(again) != 0 || len(pp.held) != 1 {
		t.Fatalf("after takeFor: %d more for the gateway, %d held; want 0, 1", len(again), len(pp.held))
	}
	if _, err := net.Listen("tcp", api); err == nil {
		t.Fatalf("%s is free while the taken listener is open", api)
	}
}
