package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/worker/model"
)

// Served model names of the models Setup writes.
const (
	// ModelTiny is the tiny preset of `warden model init` (seed 1).
	ModelTiny = "tiny"
	// ModelEndless is a larger random model that never samples EOS
	// greedily: a greedy request runs to max_tokens, slowly enough that a
	// test can act while it is generating.
	ModelEndless = "endless"
)

// EnvBinary names a prebuilt warden binary to use instead of building one.
const EnvBinary = "WARDEN_E2E_BIN"

// EnvRedis is the variable holding a Redis host:port for tests
// (scripts/test.sh sets it); clusters with Options.Redis need it.
const EnvRedis = "WARDEN_TEST_REDIS_ADDR"

// Env is what every test of one test binary shares: the binary, the dev
// PKI and the models. Create it with Setup in TestMain and Close it there.
type Env struct {
	// Dir is a temporary directory removed by Close.
	Dir string
	// Bin is the warden binary.
	Bin string
	// PKI is the dev PKI every cluster uses (API certificates and cluster
	// identities).
	PKI tlsutil.PKI
	// Models maps served model names to their directories.
	Models map[string]string
	// RedisAddr is $WARDEN_TEST_REDIS_ADDR, empty when unset.
	RedisAddr string
	// ShmDir holds the shared-memory KV segments of shm workers: a
	// directory of its own under /dev/shm (else under Dir), removed by
	// Close.
	ShmDir string

	spawn chan spawnRequest

	mu    sync.Mutex
	procs []*Process
	seq   int
}

// spawnRequest asks the spawner thread to start a command.
type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

// Setup builds the binary and writes the PKI and the models into a new
// temporary directory.
func Setup() (e *Env, err error) {
	dir, err := os.MkdirTemp("", "warden-e2e-")
	if err != nil {
		return nil, err
	}
	e = &Env{Dir: dir, RedisAddr: os.Getenv(EnvRedis), spawn: make(chan spawnRequest)}
	go e.spawner()
	defer func() {
		if err != nil {
			_ = e.Close()
		}
	}()
	if e.Bin = os.Getenv(EnvBinary); e.Bin == "" {
		e.Bin = filepath.Join(dir, "warden")
		cmd := exec.Command("go", "build", "-o", e.Bin, "github.com/warden-ai/warden/cmd/warden")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("harness: building warden: %v\n%s", err, out)
		}
	} else if e.Bin, err = filepath.Abs(e.Bin); err != nil {
		return nil, err
	}
	if e.ShmDir, err = os.MkdirTemp("/dev/shm", "warden-e2e-"); err != nil {
		if e.ShmDir, err = os.MkdirTemp(dir, "shm-"); err != nil {
			return nil, err
		}
	}
	if e.PKI, err = tlsutil.EnsureDevPKI(filepath.Join(dir, "pki"), nil); err != nil {
		return nil, fmt.Errorf("harness: dev PKI: %w", err)
	}
	e.Models = map[string]string{
		ModelTiny:    filepath.Join(dir, "models", ModelTiny),
		ModelEndless: filepath.Join(dir, "models", ModelEndless),
	}
	if err := model.Init(e.Models[ModelTiny], model.PresetTiny, 1, model.F32); err != nil {
		return nil, fmt.Errorf("harness: tiny model: %w", err)
	}
	if err := writeEndlessModel(e.Models[ModelEndless]); err != nil {
		return nil, fmt.Errorf("harness: endless model: %w", err)
	}
	return e, nil
}

// spawner starts every process from one OS thread that lives as long as
// the Env: Linux delivers a child's parent-death signal when the thread
// that forked it exits, not the process, so forking from arbitrary
// goroutines' threads would be fragile.
func (e *Env) spawner() {
	runtime.LockOSThread()
	for req := range e.spawn {
		req.err <- req.cmd.Start()
	}
}

// start starts cmd on the spawner thread and records the process for the
// orphan check.
func (e *Env) start(p *Process, cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	e.spawn <- spawnRequest{cmd: cmd, err: errc}
	if err := <-errc; err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !containsProc(e.procs, p) {
		e.procs = append(e.procs, p)
	}
	return nil
}

func containsProc(ps []*Process, p *Process) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// next returns a number unique within the Env (cluster and file names).
func (e *Env) next() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq++
	return e.seq
}

// Close kills every process the Env started that still runs, then checks
// that no process runs the Env's binary any more (an orphan, e.g. a child
// of `warden up`), kills those too, and removes Dir. It returns an error
// naming anything it had to kill.
func (e *Env) Close() error {
	var errs []error
	e.mu.Lock()
	procs := append([]*Process(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		if p.Running() {
			errs = append(errs, fmt.Errorf("harness: %s (pid %d) still ran at the end", p.Name, p.Pid()))
			_ = p.Kill()
		}
	}
	if e.Bin != "" && os.Getenv(EnvBinary) == "" {
		deadline := time.Now().Add(5 * time.Second)
		pids := e.Orphans()
		for len(pids) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			pids = e.Orphans()
		}
		for _, pid := range pids {
			errs = append(errs, fmt.Errorf("harness: orphan process %d runs %s", pid, e.Bin))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if e.spawn != nil {
		close(e.spawn)
		e.spawn = nil
	}
	for _, d := range []string{e.ShmDir, e.Dir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Orphans returns the pids of live processes running the Env's binary
// (zombies excluded). With a prebuilt binary ($WARDEN_E2E_BIN) other
// users of that binary would match too.
func (e *Env) Orphans() []int {
	return processesRunning(e.Bin)
}

// processesRunning lists live processes whose executable is bin.
func processesRunning(bin string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", ent.Name(), "exe"))
		if err != nil || strings.TrimSuffix(exe, " (deleted)") != bin {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat")); err == nil {
			// The state follows the command name in parentheses.
			if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}
