package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime/internal/cgroupmem"
)

// TestHostMemory: a cgroup limit's room less the headroom bounds the
// plan when it is below the host's MemAvailable; no limit, or a larger
// room, leaves MemAvailable; an unreadable cgroup is an error naming the
// way out.
func TestHostMemory(t *testing.T) {
	const mib = 1 << 20
	lim := cgroupmem.Limit{Version: cgroupmem.V2, Dir: "pod", Bytes: 1024 * mib, Usage: 100 * mib}
	for _, tc := range []struct {
		name  string
		avail int64
		lim   cgroupmem.Limit
		err   error
		want  MemoryPlan
	}{
		{"no cgroup limit", 8192 * mib, cgroupmem.Limit{}, cgroupmem.ErrNoLimit,
			MemoryPlan{Source: SourceMeminfo, LimitBytes: 8192 * mib, AvailableBytes: 8192 * mib}},
		{"cgroup below the host", 8192 * mib, lim, nil,
			MemoryPlan{Source: SourceCgroupV2, LimitBytes: 1024 * mib, AvailableBytes: 1024*mib - 100*mib - 256*mib, HeadroomBytes: 256 * mib}},
		{"host below the cgroup", 500 * mib, lim, nil,
			MemoryPlan{Source: SourceMeminfo, LimitBytes: 500 * mib, AvailableBytes: 500 * mib}},
		{"headroom above the room", 8192 * mib, cgroupmem.Limit{Version: cgroupmem.V1, Bytes: 300 * mib, Usage: 100 * mib}, nil,
			MemoryPlan{Source: SourceCgroupV1, LimitBytes: 300 * mib, HeadroomBytes: 256 * mib}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hostMemory(tc.avail, tc.lim, tc.err, 256*mib)
			if err != nil || got != tc.want {
				t.Fatalf("hostMemory = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	_, err := hostMemory(8192*mib, cgroupmem.Limit{}, fmt.Errorf("%w: memory.max", cgroupmem.ErrFormat), 0)
	if !errors.Is(err, cgroupmem.ErrFormat) || !strings.Contains(err.Error(), "worker.kv.memory_bytes") {
		t.Fatalf("unreadable cgroup: %v", err)
	}
}

// cgroupChildEnv carries the model directory to the child process of
// TestOpenFitsCgroupLimit.
const cgroupChildEnv = "WARDEN_TEST_CGROUP_CHILD_MODEL"

// Limits of TestOpenFitsCgroupLimit's cgroup.
const (
	cgroupLimit    = 384 << 20
	cgroupHeadroom = 64 << 20
)

// TestOpenFitsCgroupLimit creates a child of this process's memory cgroup
// with a 384 MiB limit (cgroup v2 memory.max, or v1
// memory.limit_in_bytes where the memory controller is on v1), runs a
// process inside it that opens a runtime with the whole remaining memory
// for its KV pool (memory_fraction 1) and writes every page of the pool,
// and checks that the plan came from the cgroup and fits under the limit
// less the headroom, and that the process was not OOM-killed. Sized from
// /proc/meminfo alone the pool is the host's free memory and the process
// is killed. Skipped, with the reason, where the kernel gives no cgroup
// write access.
func TestOpenFitsCgroupLimit(t *testing.T) {
	if avail, err := memAvailable(); err != nil || avail < 2*cgroupLimit {
		t.Skipf("the host has too little free memory for the cgroup to be the bound (MemAvailable %d bytes, %v)", avail, err)
	}
	procs := makeCgroup(t, cgroupLimit)
	dir := t.TempDir()
	if err := model.Init(dir, model.PresetTiny, 1, model.BF16); err != nil {
		t.Fatal(err)
	}
	// The shell joins the cgroup, then becomes the test binary: all of
	// the child's memory is charged there.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1" && exec "$2" -test.run='^TestCgroupChild$' -test.count=1`,
		"sh", procs, os.Args[0])
	cmd.Env = append(os.Environ(), cgroupChildEnv+"="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child in the cgroup: %v (OOM-killed?)\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	line, _, _ := strings.Cut(stdout.String(), "\n")
	var plan MemoryPlan
	if err := json.Unmarshal([]byte(line), &plan); err != nil {
		t.Fatalf("child output %q: %v", stdout.String(), err)
	}
	t.Logf("plan in the cgroup: %+v", plan)
	if plan.Source != SourceCgroupV1 && plan.Source != SourceCgroupV2 {
		t.Fatalf("plan source %q, want the cgroup's", plan.Source)
	}
	if plan.LimitBytes != cgroupLimit || plan.HeadroomBytes != cgroupHeadroom {
		t.Fatalf("plan limit %d headroom %d, want %d and %d", plan.LimitBytes, plan.HeadroomBytes, cgroupLimit, cgroupHeadroom)
	}
	if plan.BudgetBytes <= 0 || plan.BudgetBytes+plan.WeightsBytes > cgroupLimit-cgroupHeadroom {
		t.Fatalf("pool %d + weights %d bytes does not fit the limit %d less headroom %d", plan.BudgetBytes, plan.WeightsBytes, cgroupLimit, cgroupHeadroom)
	}
}

// TestCgroupChild is TestOpenFitsCgroupLimit's child: it opens a runtime
// sized from memory, writes every byte page of its pool and prints the
// plan as JSON.
func TestCgroupChild(t *testing.T) {
	dir := os.Getenv(cgroupChildEnv)
	if dir == "" {
		t.Skip("runs as TestOpenFitsCgroupLimit's child only")
	}
	r, err := Open(Options{ModelDir: dir, Threads: 1, PageTokens: 16, KVFraction: 1, MemoryHeadroom: cgroupHeadroom,
		ChunkTokens: 32, MaxBatch: 2,
		Storage: func(pages, pageBytes int) ([]byte, error) {
			b := make([]byte, pages*pageBytes)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // make it resident: charged to the cgroup
			}
			return b, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := json.Marshal(r.Memory)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(string(out))
}

// makeCgroup creates a child of this process's memory cgroup limited to
// limit bytes, removed when the test ends, and returns its cgroup.procs
// file. It skips the test where the kernel refuses the writes.
func makeCgroup(t *testing.T, limit int64) string {
	t.Helper()
	const root = "/sys/fs/cgroup"
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	v, rel, err := cgroupmem.Locate(os.DirFS(root), self)
	if err != nil {
		t.Skipf("no memory cgroup of this process under %s: %v", root, err)
	}
	parent := filepath.Join(root, rel)
	limitFile := "memory.limit_in_bytes"
	if v == cgroupmem.V2 {
		limitFile = "memory.max"
		// A v2 child has the memory controller only if its parent
		// delegates it.
		sub := filepath.Join(parent, "cgroup.subtree_control")
		if err := os.WriteFile(sub, []byte("+memory"), 0); err != nil {
			t.Skipf("the kernel refuses to enable the memory controller for children of %s: %v", parent, err)
		}
	}
	dir := filepath.Join(parent, fmt.Sprintf("warden-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no write access to the %s hierarchy at %s: %v", v, parent, err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing the test cgroup: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Skipf("the kernel refuses a memory limit on %s: %v", dir, err)
	}
	t.Logf("test cgroup %s (%s), %s = %d", dir, v, limitFile, limit)
	return filepath.Join(dir, "cgroup.procs")
}
