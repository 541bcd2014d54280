package harness

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits for a process to exit after SIGTERM
// before it kills it.
const StopGrace = 20 * time.Second

// Process is one process of a test: warden (gateway, worker, `warden up`)
// or, with Bin set, another program such as redis-server. It can be
// started again after it ended, with the same arguments; its output is
// appended to LogPath across starts.
type Process struct {
	// Name identifies it in messages ("gateway-0", "decode-tiny-…").
	Name string
	// Args are the arguments after the binary.
	Args []string
	// LogPath receives stdout and stderr.
	LogPath string
	// Env, when set, replaces the inherited environment.
	Env []string
	// Dir, when set, is the working directory (default: the test's).
	Dir string
	// Bin, when set, is the executable instead of the Env's warden binary
	// (e.g. redis-server).
	Bin string

	env *Env

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	starts int
	// wanted: started and not stopped or killed on purpose since, so a
	// Cluster wait fails at once if it ended.
	wanted bool
}

// NewProcess returns a process running env's binary with args; Start runs
// it.
func (e *Env) NewProcess(name, logPath string, args ...string) *Process {
	return &Process{Name: name, Args: args, LogPath: logPath, env: e}
}

// Start runs the process. It fails if the process is running.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("harness: %s is already running", p.Name)
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	p.starts++
	fmt.Fprintf(log, "=== harness: start #%d of %s: %s\n", p.starts, p.Name, strings.Join(p.Args, " "))
	bin := p.Bin
	if bin == "" {
		bin = p.env.Bin
	}
	cmd := exec.Command(bin, p.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = p.Env
	cmd.Dir = p.Dir
	// Own process group (signals reach it alone); SIGKILL when the test
	// binary dies, so a crashed test leaves no process behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.env.start(p, cmd); err != nil {
		return fmt.Errorf("harness: starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err, p.wanted = cmd, done, nil, true
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Pid returns the process ID of the current (or last) run, 0 before Start.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// crashed reports whether the process ended although nobody stopped or
// killed it through Stop or Kill.
func (p *Process) crashed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted && isClosed(p.done)
}

// unwanted records that the process is being stopped on purpose.
func (p *Process) unwanted() {
	p.mu.Lock()
	p.wanted = false
	p.mu.Unlock()
}

// Running reports whether the process was started and has not ended.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

// Done returns a channel closed when the current run ends (nil before
// Start).
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr returns how the last run ended: nil for exit status 0, an
// *exec.ExitError otherwise. Only meaningful once Done is closed.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Signal sends sig to the process (not its group).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return fmt.Errorf("harness: %s is not running", p.Name)
	}
	return syscall.Kill(cmd.Process.Pid, sig)
}

// Kill sends SIGKILL to the process's group and waits until it ended.
// Killing a process that is not running does nothing.
func (p *Process) Kill() error {
	p.unwanted()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if !isClosed(done) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	<-done
	return nil
}

// Stop sends SIGTERM (waking a stopped process with SIGCONT) and waits for
// the process to exit, killing it after grace. It returns the exit error
// (nil for a clean exit), or an error saying it had to be killed.
func (p *Process) Stop(grace time.Duration) error {
	p.unwanted()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if !isClosed(done) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return p.ExitErr()
	case <-t.C:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return fmt.Errorf("harness: %s did not exit within %v of SIGTERM and was killed", p.Name, grace)
}

// Log returns everything the process wrote so far, across its runs.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// LogTail returns the last n lines of Log.
func (p *Process) LogTail(n int) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// LogLines returns the lines of Log that contain s (a request ID, say).
func (p *Process) LogLines(s string) string {
	var lines []string
	for l := range strings.Lines(p.Log()) {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "")
}
