package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a benchmark ran: the figures are only
// comparable within one run, so the report names its machine and its
// load.
type Machine struct {
	// Start is when the run began.
	Start time.Time
	// CPU is the processor's model name ("" when unknown).
	CPU string
	// CPUs is the number of logical CPUs; GOMAXPROCS the Go scheduler's.
	CPUs, GOMAXPROCS int
	// GoVersion is the Go release the binary was built with.
	GoVersion string
	// LoadBefore and LoadAfter are the 1-minute load averages at the start
	// and at the end of the run (-1 when unknown).
	LoadBefore, LoadAfter float64
}

// currentMachine describes this machine now; finish records the load at
// the end.
func currentMachine() Machine {
	return Machine{
		Start: time.Now(), CPU: cpuModel(), CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), LoadBefore: loadAverage(), LoadAfter: -1,
	}
}

func (m *Machine) finish() { m.LoadAfter = loadAverage() }

// String is one line for a report.
func (m Machine) String() string {
	cpu := m.CPU
	if cpu == "" {
		cpu = runtime.GOARCH
	}
	load := func(l float64) string {
		if l < 0 {
			return "?"
		}
		return fmt.Sprintf("%.2f", l)
	}
	return fmt.Sprintf("%s, %d CPUs (%s), GOMAXPROCS %d, %s, load average %s before / %s after",
		m.Start.Format("2006-01-02 15:04"), m.CPUs, cpu, m.GOMAXPROCS, m.GoVersion, load(m.LoadBefore), load(m.LoadAfter))
}

// cpuModel reads the processor's name from /proc/cpuinfo (Linux).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage reads the 1-minute load average from /proc/loadavg (Linux),
// or returns -1.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}
