// Package cgroupmem reads the memory limit a process runs under from its
// control groups, so that a worker in a container plans its KV pool for
// the container and not for the node.
//
// The cgroup of the process comes from /proc/self/cgroup: a line
// "N:memory:/path" (or with memory among comma-separated controllers)
// means the memory controller is on a cgroup v1 hierarchy mounted at
// <root>/memory; otherwise the line "0::/path" names a cgroup v2 (unified)
// group under <root>. The limit of every group from the process's own up
// to the hierarchy's root applies, so each level is read — v2
// memory.max ("max" means none) with memory.current and memory.stat, v1
// memory.limit_in_bytes (a value from 2^62 up means none) with
// memory.usage_in_bytes and memory.stat — and the level with the least
// memory left (limit − usage) binds. Usage is the working set, as the
// kubelet counts it: the charged memory less the inactive file cache
// (inactive_file; v1's hierarchical total_inactive_file), which the
// kernel reclaims before it would OOM-kill.
//
// A container often sees its own group as the mount's root (a cgroup
// namespace, or a v1 bind mount) while /proc/self/cgroup still names the
// host's path: when the named directory does not exist, its leading
// components are dropped until one does.
//
// Read works on any fs.FS, so tests and fuzzing give it a fake root;
// Self reads the real files.
package cgroupmem
