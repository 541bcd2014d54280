package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// upLockFile is the lock of `warden up`'s state directory; it holds the
// PID of the instance that owns the directory.
const upLockFile = "up.lock"

// errStateDirBusy marks a state directory another `warden up` holds.
var errStateDirBusy = errors.New("state directory in use")

// lockStateDir takes the state directory for this process, before
// anything is written into it: a second `warden up` on the same directory
// would otherwise rewrite the first one's configs and truncate its logs.
// The lock is an flock(2) on a file in the directory, so it ends with the
// process however the process ends; unlock releases it earlier.
func lockStateDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	path := filepath.Join(dir, upLockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory lock %s: %w", path, err)
		}
		holder := "another process"
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				holder = fmt.Sprintf("another warden up (pid %d)", pid)
			}
		}
		return nil, fmt.Errorf("%w: %s uses %s; stop it, or give this one its own --state-dir and --listen", errStateDirBusy, holder, dir)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state directory lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
