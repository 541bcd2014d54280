package cgroupmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// Version names the cgroup hierarchy a limit came from.
type Version string

// The two cgroup versions.
const (
	V1 Version = "cgroup v1"
	V2 Version = "cgroup v2"
)

// Limit is the memory limit that binds the process: the group, along the
// hierarchy from the process's own to the root, with the least memory
// left.
type Limit struct {
	Version Version
	// Dir is the binding group's directory relative to the cgroup root
	// ("memory/a/b" for v1, "a/b" for v2).
	Dir string
	// Bytes is that group's limit, Usage its working set (charged
	// memory less inactive file cache).
	Bytes, Usage int64
}

// Available is the memory the group can still charge: Bytes − Usage, at
// least 0.
func (l Limit) Available() int64 { return max(0, l.Bytes-l.Usage) }

// ErrNoLimit reports that no cgroup memory limit applies: no memory
// controller, or no limit at any level.
var ErrNoLimit = errors.New("cgroupmem: no cgroup memory limit")

// ErrFormat reports a cgroup file that does not parse.
var ErrFormat = errors.New("cgroupmem: malformed cgroup file")

// v1Unlimited is where v1 limits mean "no limit": the kernel reports its
// page counter maximum (2^63 − 1 rounded down to a page).
const v1Unlimited = int64(1) << 62

// Self reads the limit of the calling process from /proc/self/cgroup and
// the cgroup filesystem at /sys/fs/cgroup. Missing files (no cgroup
// filesystem) give ErrNoLimit.
func Self() (Limit, error) {
	return selfAt("/proc/self/cgroup", "/sys/fs/cgroup")
}

// selfAt is Self reading the process's cgroup list from procFile and the
// cgroup filesystem under root.
func selfAt(procFile, root string) (Limit, error) {
	self, err := os.ReadFile(procFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Limit{}, ErrNoLimit
	}
	if err != nil {
		return Limit{}, fmt.Errorf("cgroupmem: %w", err)
	}
	return Read(os.DirFS(root), self)
}

// Read finds the binding limit of the process whose /proc/self/cgroup is
// self, in the cgroup filesystem root (the directory /sys/fs/cgroup).
func Read(root fs.FS, self []byte) (Limit, error) {
	v, leaf, err := Locate(root, self)
	if err != nil {
		return Limit{}, err
	}
	h := hierarchies[v]
	best, found := Limit{}, false
	for dir := leaf; ; dir = path.Dir(dir) {
		l, ok, err := h.level(root, dir)
		if err != nil {
			return Limit{}, err
		}
		if ok && (!found || l.Available() < best.Available()) {
			best, found = l, true
		}
		if dir == h.mount {
			break
		}
	}
	if !found {
		return Limit{}, ErrNoLimit
	}
	return best, nil
}

// Locate returns the hierarchy and the directory (relative to root) of
// the memory cgroup of the process whose /proc/self/cgroup is self. It
// fails with ErrNoLimit when there is no memory hierarchy or the group's
// directory cannot be found.
func Locate(root fs.FS, self []byte) (Version, string, error) {
	v, p, err := parseSelf(self)
	if err != nil {
		return "", "", err
	}
	dir, ok := resolve(root, hierarchies[v].mount, p)
	if !ok {
		return "", "", ErrNoLimit
	}
	return v, dir, nil
}

// parseSelf picks the memory controller's hierarchy and path from
// /proc/self/cgroup: a v1 memory line wins over the v2 line (on a hybrid
// host the memory controller is on v1).
func parseSelf(self []byte) (Version, string, error) {
	var v2 string
	haveV2 := false
	sc := bufio.NewScanner(bytes.NewReader(self))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		id, rest, ok1 := strings.Cut(line, ":")
		ctrls, p, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || !strings.HasPrefix(p, "/") {
			return "", "", fmt.Errorf("%w: /proc/self/cgroup line %d %q: want hierarchy-id:controllers:/path", ErrFormat, n, line)
		}
		if _, err := strconv.ParseUint(id, 10, 32); err != nil {
			return "", "", fmt.Errorf("%w: /proc/self/cgroup line %d %q: hierarchy id is not a number", ErrFormat, n, line)
		}
		if id == "0" && ctrls == "" {
			v2, haveV2 = p, true
			continue
		}
		for c := range strings.SplitSeq(ctrls, ",") {
			if c == "memory" {
				return V1, p, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("%w: /proc/self/cgroup: %w", ErrFormat, err)
	}
	if !haveV2 {
		return "", "", ErrNoLimit
	}
	return V2, v2, nil
}

// resolve returns the directory of the cgroup at p under mount, dropping
// leading components of p while the directory does not exist (the
// mount's root is then the process's group or an ancestor of it).
func resolve(root fs.FS, mount, p string) (string, bool) {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	for i := range len(parts) + 1 {
		dir := path.Join(append([]string{mount}, parts[i:]...)...)
		if !fs.ValidPath(dir) {
			continue
		}
		if st, err := fs.Stat(root, dir); err == nil && st.IsDir() {
			return dir, true
		}
	}
	return "", false
}

// hierarchy is how one cgroup version lays out its memory files.
type hierarchy struct {
	version Version
	// mount is the hierarchy's directory under the cgroup root.
	mount                 string
	limit, usage          string
	inactive, inactiveAlt string // memory.stat keys, the first present wins
	// unlimited reports whether a limit file's content means no limit.
	unlimited func(s string, v int64) bool
}

var hierarchies = map[Version]hierarchy{
	V1: {version: V1, mount: "memory", limit: "memory.limit_in_bytes", usage: "memory.usage_in_bytes",
		inactive: "total_inactive_file", inactiveAlt: "inactive_file",
		unlimited: func(s string, v int64) bool { return s == "-1" || v >= v1Unlimited }},
	V2: {version: V2, mount: ".", limit: "memory.max", usage: "memory.current",
		inactive: "inactive_file", inactiveAlt: "inactive_file",
		unlimited: func(s string, _ int64) bool { return s == "max" }},
}

// level reads one group's limit and usage; ok is false when the group has
// no limit (no limit file: the controller is not enabled there, or the
// root of a v2 hierarchy).
func (h hierarchy) level(root fs.FS, dir string) (Limit, bool, error) {
	raw, err := fs.ReadFile(root, path.Join(dir, h.limit))
	if errors.Is(err, fs.ErrNotExist) {
		return Limit{}, false, nil
	}
	if err != nil {
		return Limit{}, false, fmt.Errorf("cgroupmem: %w", err)
	}
	s := strings.TrimSpace(string(raw))
	limit, err := strconv.ParseInt(s, 10, 64)
	switch {
	case h.unlimited(s, limit):
		return Limit{}, false, nil
	case err != nil || limit < 0:
		return Limit{}, false, fmt.Errorf("%w: %s: %q is not a byte count", ErrFormat, path.Join(dir, h.limit), s)
	}
	usage, err := readCount(root, path.Join(dir, h.usage))
	if err != nil {
		return Limit{}, false, err
	}
	inactive, err := h.readInactive(root, path.Join(dir, "memory.stat"))
	if err != nil {
		return Limit{}, false, err
	}
	return Limit{Version: h.version, Dir: dir, Bytes: limit, Usage: max(0, usage-inactive)}, true, nil
}

// readCount reads a file holding one non-negative decimal number.
func readCount(root fs.FS, name string) (int64, error) {
	raw, err := fs.ReadFile(root, name)
	if err != nil {
		return 0, fmt.Errorf("cgroupmem: %w", err)
	}
	s := strings.TrimSpace(string(raw))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: %s: %q is not a byte count", ErrFormat, name, s)
	}
	return v, nil
}

// readInactive reads the inactive file cache from memory.stat ("key
// value" lines); a missing file or key counts as 0.
func (h hierarchy) readInactive(root fs.FS, name string) (int64, error) {
	raw, err := fs.ReadFile(root, name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cgroupmem: %w", err)
	}
	vals := map[string]int64{}
	for n, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if k != h.inactive && k != h.inactiveAlt {
			continue
		}
		x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if !ok || err != nil || x < 0 {
			return 0, fmt.Errorf("%w: %s line %d %q: want \"key bytes\"", ErrFormat, name, n+1, line)
		}
		vals[k] = x
	}
	if v, ok := vals[h.inactive]; ok {
		return v, nil
	}
	return vals[h.inactiveAlt], nil
}
