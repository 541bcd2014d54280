package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/warden-ai/warden/internal/listenfd"
)

// child is a process started by `warden up`.
type child struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	args    []string
	env     []string
	started time.Time
	done    chan struct{} // closed once the process was reaped
	err     error         // Wait's result, set before done is closed
}

// startChild runs exe with args, its output written to logPath (a new
// log), in its own process group and tied to this process's life
// (childAttr).
//
// lns are bound listeners the child takes over (listenfd): they are
// closed here once it has started, or failed to. A restart binds its
// addresses itself.
func startChild(name, exe string, args, env []string, logPath string, lns []*net.TCPListener) (*child, error) {
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	files, fdEnv, err := listenfd.Pass(lns)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	return runChild(name, exe, args, env, logPath, os.O_TRUNC, files, fdEnv)
}

// restart runs c's command again as a new child whose output is appended
// to c's log, after the lines that tell why c ended.
func (c *child) restart() (*child, error) {
	return runChild(c.name, c.cmd.Path, c.args, c.env, c.logPath, os.O_APPEND, nil, "")
}

// runChild starts a child; logMode is os.O_TRUNC or os.O_APPEND. files
// and fdEnv (listenfd.Pass) hand it listening sockets; the child keeps
// env alone, for a restart.
func runChild(name, exe string, args, env []string, logPath string, logMode int, files []*os.File, fdEnv string) (*child, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logMode, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	defer log.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	if len(files) > 0 {
		cmd.Env = append(slices.Clip(env), fdEnv)
		cmd.ExtraFiles = files
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the %s: %w", name, err)
	}
	c := &child{name: name, logPath: logPath, cmd: cmd, args: args, env: env, started: time.Now(), done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the child's process group.
func (c *child) signal(sig syscall.Signal) {
	if !c.exited() {
		_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	}
}

// stop asks the child to shut down (SIGTERM) and kills it after grace or
// when force is closed. It returns the child's exit error, nil for a clean
// exit.
func (c *child) stop(grace time.Duration, force <-chan struct{}) error {
	c.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return c.err
	case <-t.C:
	case <-force:
	}
	c.signal(syscall.SIGKILL)
	<-c.done
	return fmt.Errorf("killed after not stopping within %v", grace)
}

// crashReport describes a child that ended on its own: its exit status,
// the error it exited with (the CLI's last "warden ...: " line, such as a
// refused registration's cause) and the first lines of its crash (a Go
// panic or fatal error) or else the last lines of its log.
func (c *child) crashReport() string {
	lines := crashExcerpt(c.logPath, 20)
	var b strings.Builder
	b.WriteString(c.exitSummary(lines))
	if len(lines) > 0 {
		b.WriteString(":\n")
		for _, l := range lines {
			b.WriteString("    " + l + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// exitSummary says in one line how c ended: its exit status, the error it
// exited with (the CLI's last "warden ...: " line of lines, its log's
// excerpt) and where its log is.
func (c *child) exitSummary(lines []string) string {
	status := "exited"
	if c.err != nil {
		status = c.err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the %s stopped unexpectedly (%s)", c.name, status)
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "warden ") {
			fmt.Fprintf(&b, ": %s", lines[i])
			break
		}
	}
	fmt.Fprintf(&b, "; its log is %s", c.logPath)
	return b.String()
}

// crashExcerpt returns up to n lines of the log at path: from the start of
// the last Go panic or fatal error if there is one, otherwise the last n.
func crashExcerpt(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "panic: ") || strings.HasPrefix(lines[i], "fatal error: ") {
			return lines[i:min(i+n, len(lines))]
		}
	}
	return lines[max(len(lines)-n, 0):]
}
