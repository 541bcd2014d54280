//go:build unix

package kvtransfer

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary, started again by
// TestWritersAttachedAfterKill, map the segment named there and wait.
const helperEnv = "WARDEN_KVTRANSFER_WRITER_HELPER"

func init() {
	if path := os.Getenv(helperEnv); path != "" {
		seg, err := OpenSegment(path)
		if err != nil {
			os.Exit(2)
		}
		copy(seg.Page(0), "late bytes")
		os.Stdout.WriteString("mapped\n")
		select {} // a stalled writer: killed by the test
	}
}

// TestWritersAttached: a segment no writer opened has none attached; an
// OpenSegment writer is attached until it Closes.
func TestWritersAttached(t *testing.T) {
	seg, err := CreateSegment(filepath.Join(t.TempDir(), "seg"), 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	attached := func() bool {
		t.Helper()
		a, err := seg.WritersAttached()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if attached() {
		t.Fatal("writers attached before any opened the segment")
	}
	w1, err := OpenSegment(seg.Path())
	if err != nil {
		t.Fatal(err)
	}
	w2, err := OpenSegment(seg.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !attached() {
		t.Fatal("two writers mapped, none reported")
	}
	w1.Close()
	if !attached() {
		t.Fatal("one writer still mapped, none reported")
	}
	w2.Close()
	if attached() {
		t.Fatal("writers reported after every one closed")
	}
}

// TestWritersAttachedAfterKill: a writer process that is stopped in the
// middle of its work (SIGSTOP) is still attached; once it is killed, the
// kernel lets go of its lock with its mapping and none is attached.
func TestWritersAttachedAfterKill(t *testing.T) {
	seg, err := CreateSegment(filepath.Join(t.TempDir(), "seg"), 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+seg.Path())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "mapped\n" {
		t.Fatalf("helper writer: %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if a, err := seg.WritersAttached(); err != nil || !a {
		t.Fatalf("stalled writer process: attached %v, %v; want attached", a, err)
	}
	cmd.Process.Kill()
	cmd.Wait() // reaped: its mappings and its lock are gone
	killed = true
	if a, err := seg.WritersAttached(); err != nil || a {
		t.Fatalf("killed writer process: attached %v, %v; want none", a, err)
	}
}

// TestDeferredReleaseReclaim: Reclaim releases only holds that were
// quarantined before its check, and only when the check proves no writer
// is left; an ack afterwards releases nothing twice.
func TestDeferredReleaseReclaim(t *testing.T) {
	var outcomes []Outcome
	d := NewDeferredRelease(time.Hour, func(o Outcome, _ time.Duration) { outcomes = append(outcomes, o) })
	defer d.Close()
	released := map[string]int{}
	hold := func(name string) (TransferID, *hold) {
		id := NewTransferID()
		if err := d.Hold(id, 1, func() { released[name]++ }, func() {}); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		h := d.holds[holdKey{id, 1}]
		d.mu.Unlock()
		return id, h
	}
	qid, qh := hold("quarantined")
	_, late := hold("quarantined during the check")
	hold("held")
	d.expire(holdKey{qid, 1}, qh) // the drain timeout
	if n := d.Reclaim(func() bool { return false }); n != 0 || released["quarantined"] != 0 {
		t.Fatalf("Reclaim with a writer attached released %d", n)
	}
	n := d.Reclaim(func() bool {
		for k, h := range d.holds {
			if h == late {
				d.expire(k, h) // quarantined after the listing: its writer may have attached after the check
			}
		}
		return true
	})
	if n != 1 || released["quarantined"] != 1 || released["held"] != 0 || released["quarantined during the check"] != 0 {
		t.Fatalf("Reclaim released %d: %v; want only the hold quarantined before the check", n, released)
	}
	if d.Ack(qid, 1) || released["quarantined"] != 1 {
		t.Fatal("a late ack released reclaimed pages again")
	}
	if held, q := d.Pending(); held != 2 || q != 1 {
		t.Fatalf("pending %d, %d quarantined; want 2, 1", held, q)
	}
	if outcomes[len(outcomes)-1] != OutcomeReclaimed {
		t.Errorf("outcomes %v, want reclaimed last", outcomes)
	}
}
