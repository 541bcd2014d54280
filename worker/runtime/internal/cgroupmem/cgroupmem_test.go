package cgroupmem

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

const mib = 1 << 20

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// hybrid is a v1 memory hierarchy next to an empty unified one, as on a
// systemd hybrid host.
const hybridSelf = "12:pids:/a\n4:memory:/kubepods/pod1/ctr\n1:name=systemd:/a\n0::/a\n"

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		self string
		fs   fstest.MapFS
		want Limit
	}{{
		name: "v2 leaf limit",
		self: "0::/kubepods/pod1/ctr\n",
		fs: fstest.MapFS{
			"cgroup.controllers":               file("cpu memory pids\n"),
			"kubepods/pod1/ctr/memory.max":     file("536870912\n"),
			"kubepods/pod1/ctr/memory.current": file("209715200\n"),
			"kubepods/pod1/ctr/memory.stat":    file("anon 104857600\nfile 104857600\nactive_file 62914560\ninactive_file 41943040\n"),
			"kubepods/pod1/memory.max":         file("max\n"),
			"kubepods/pod1/memory.current":     file("209715200\n"),
			"kubepods/memory.max":              file("max\n"),
			"kubepods/memory.current":          file("1073741824\n"),
		},
		want: Limit{Version: V2, Dir: "kubepods/pod1/ctr", Bytes: 512 * mib, Usage: 200*mib - 40*mib},
	}, {
		name: "v2 nested: the parent's limit binds",
		self: "0::/kubepods/pod1/ctr\n",
		fs: fstest.MapFS{
			"kubepods/pod1/ctr/memory.max":     file("1073741824\n"),
			"kubepods/pod1/ctr/memory.current": file("104857600\n"),
			"kubepods/pod1/memory.max":         file("314572800\n"), // 300 MiB
			"kubepods/pod1/memory.current":     file("209715200\n"), // 200 MiB: 100 left
			"kubepods/pod1/memory.stat":        file("inactive_file 0\n"),
		},
		want: Limit{Version: V2, Dir: "kubepods/pod1", Bytes: 300 * mib, Usage: 200 * mib},
	}, {
		name: "v2 namespaced: the group is the mount's root",
		self: "0::/../../system.slice/x\n", // path from outside the namespace
		fs: fstest.MapFS{
			"memory.max":     file("268435456\n"),
			"memory.current": file("0\n"),
		},
		want: Limit{Version: V2, Dir: ".", Bytes: 256 * mib},
	}, {
		name: "v2 host path missing below the mount: leading components dropped",
		self: "0::/kubepods/pod1/ctr\n",
		fs: fstest.MapFS{
			"ctr/memory.max":     file("268435456\n"),
			"ctr/memory.current": file("10\n"),
		},
		want: Limit{Version: V2, Dir: "ctr", Bytes: 256 * mib, Usage: 10},
	}, {
		name: "v1 hybrid: memory on v1 wins over the unified line",
		self: hybridSelf,
		fs: fstest.MapFS{
			"unified/cgroup.controllers":                     file(""),
			"memory/memory.limit_in_bytes":                   file("9223372036854771712\n"),
			"memory/memory.usage_in_bytes":                   file("4294967296\n"),
			"memory/kubepods/memory.limit_in_bytes":          file("9223372036854771712\n"),
			"memory/kubepods/memory.usage_in_bytes":          file("1\n"),
			"memory/kubepods/pod1/memory.limit_in_bytes":     file("1073741824\n"),
			"memory/kubepods/pod1/memory.usage_in_bytes":     file("524288000\n"),
			"memory/kubepods/pod1/memory.stat":               file("cache 1\ninactive_file 5\ntotal_inactive_file 104857600\n"),
			"memory/kubepods/pod1/ctr/memory.limit_in_bytes": file("2147483648\n"),
			"memory/kubepods/pod1/ctr/memory.usage_in_bytes": file("524288000\n"),
		},
		want: Limit{Version: V1, Dir: "memory/kubepods/pod1", Bytes: 1024 * mib, Usage: 500*mib - 100*mib},
	}, {
		name: "v1 combined controllers, no total_ key",
		self: "3:cpu,memory:/a\n",
		fs: fstest.MapFS{
			"memory/a/memory.limit_in_bytes": file("104857600"),
			"memory/a/memory.usage_in_bytes": file("52428800"),
			"memory/a/memory.stat":           file("inactive_file 10485760\n"),
		},
		want: Limit{Version: V1, Dir: "memory/a", Bytes: 100 * mib, Usage: 40 * mib},
	}, {
		name: "usage above the limit leaves nothing",
		self: "0::/a\n",
		fs: fstest.MapFS{
			"a/memory.max":     file("100\n"),
			"a/memory.current": file("200\n"),
		},
		want: Limit{Version: V2, Dir: "a", Bytes: 100, Usage: 200},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.fs, []byte(tc.self))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("Read = %+v, want %+v", got, tc.want)
			}
			if want := max(0, tc.want.Bytes-tc.want.Usage); got.Available() != want {
				t.Fatalf("Available = %d, want %d", got.Available(), want)
			}
		})
	}
}

func TestReadNoLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		self string
		fs   fstest.MapFS
	}{
		{"v2 max everywhere", "0::/a/b\n", fstest.MapFS{
			"a/b/memory.max": file("max\n"), "a/b/memory.current": file("1\n"), "a/memory.max": file("max\n")}},
		{"v2 without the memory controller", "0::/a\n", fstest.MapFS{"a/cgroup.procs": file("1\n")}},
		{"v1 unlimited", "4:memory:/a\n", fstest.MapFS{
			"memory/a/memory.limit_in_bytes": file("9223372036854771712\n"), "memory/memory.limit_in_bytes": file("-1\n")}},
		{"v1 hierarchy not mounted", "4:memory:/a\n", fstest.MapFS{"cpu/a/cpu.shares": file("1024\n")}},
		{"no memory hierarchy at all", "5:cpu:/a\n", fstest.MapFS{}},
		{"empty /proc/self/cgroup", "", fstest.MapFS{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Read(tc.fs, []byte(tc.self))
			if !errors.Is(err, ErrNoLimit) {
				t.Fatalf("Read = %+v, %v; want ErrNoLimit", l, err)
			}
		})
	}
}

func TestReadGarbage(t *testing.T) {
	v2 := func(max, current, stat string) fstest.MapFS {
		return fstest.MapFS{"a/memory.max": file(max), "a/memory.current": file(current), "a/memory.stat": file(stat)}
	}
	for _, tc := range []struct {
		name, self string
		fs         fstest.MapFS
		want       string
	}{
		{"self line without colons", "garbage\n", nil, `/proc/self/cgroup line 1 "garbage"`},
		{"self relative path", "0::a/b\n", nil, `line 1 "0::a/b"`},
		{"self id not a number", "x::/a\n", nil, "hierarchy id is not a number"},
		{"memory.max not a number", "0::/a\n", v2("lots\n", "1\n", ""), `a/memory.max: "lots" is not a byte count`},
		{"memory.max negative", "0::/a\n", v2("-5\n", "1\n", ""), `a/memory.max: "-5" is not a byte count`},
		{"memory.current garbage", "0::/a\n", v2("100\n", "1.5\n", ""), `a/memory.current: "1.5" is not a byte count`},
		{"memory.current missing", "0::/a\n", fstest.MapFS{"a/memory.max": file("100\n")}, "memory.current"},
		{"memory.stat garbage", "0::/a\n", v2("100\n", "1\n", "inactive_file many\n"), `a/memory.stat line 1 "inactive_file many"`},
		{"v1 limit garbage", "4:memory:/a\n", fstest.MapFS{"memory/a/memory.limit_in_bytes": file("0x10\n")}, `"0x10" is not a byte count`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Read(tc.fs, []byte(tc.self))
			if err == nil || errors.Is(err, ErrNoLimit) {
				t.Fatalf("Read = %+v, %v; want an error", l, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// FuzzRead feeds arbitrary file contents to the parser, as v1 and v2
// hierarchies: it must return a limit or an error, never panic, and a
// limit it returns must be one of the files' values.
func FuzzRead(f *testing.F) {
	f.Add([]byte("0::/a/b\n"), []byte("536870912\n"), []byte("1000\n"), []byte("inactive_file 10\n"))
	f.Add([]byte(hybridSelf), []byte("max\n"), []byte("0"), []byte(""))
	f.Add([]byte("4:memory:/a/b\n"), []byte("9223372036854771712"), []byte("-1"), []byte("total_inactive_file x"))
	f.Add([]byte("0::/../..\n1:memory:\n"), []byte(" 12 "), []byte("\x00"), []byte("inactive_file\n"))
	f.Fuzz(func(t *testing.T, self, limit, usage, stat []byte) {
		fsys := fstest.MapFS{}
		for _, dir := range []string{"a", "a/b", "memory/a", "memory/a/b"} {
			lim, cur := "memory.max", "memory.current"
			if dir[0] == 'm' {
				lim, cur = "memory.limit_in_bytes", "memory.usage_in_bytes"
			}
			fsys[dir+"/"+lim] = &fstest.MapFile{Data: limit}
			fsys[dir+"/"+cur] = &fstest.MapFile{Data: usage}
			fsys[dir+"/memory.stat"] = &fstest.MapFile{Data: stat}
		}
		l, err := Read(fsys, self)
		if err != nil {
			return
		}
		if l.Bytes < 0 || l.Usage < 0 || l.Available() < 0 || l.Available() > l.Bytes {
			t.Fatalf("Read = %+v", l)
		}
		if _, ok := fsys[l.Dir+"/memory.stat"]; !ok {
			t.Fatalf("Read names %q, not a group of the fake root", l.Dir)
		}
	})
}

// A Kubernetes node with the systemd cgroup driver on cgroup v2: the
// groups of a burstable pod with a main container and a sidecar.
const (
	v2Pod  = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice"
	v2Main = v2Pod + "/cri-containerd-3f9a7c1e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e5b7d9f1a3c5e7b9d1f3a.scope"
	// v2Stat is a v2 memory.stat as the kernel writes it (abridged).
	v2Stat = "anon 104857600\nfile 73400320\nkernel 2097152\nkernel_stack 163840\npagetables 532480\nsock 0\nshmem 0\n" +
		"file_mapped 10485760\nfile_dirty 0\nfile_writeback 0\nswapcached 0\nanon_thp 0\ninactive_anon 104857600\n" +
		"active_anon 0\ninactive_file 41943040\nactive_file 31457280\nunevictable 0\nslab_reclaimable 1048576\n" +
		"slab_unreclaimable 524288\npgfault 12345\npgmajfault 12\nworkingset_refault_anon 0\nworkingset_refault_file 0\n"
)

// writeTree writes files (path relative to the root: content) under a
// new directory, as a cgroup filesystem lays them out, and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range files {
		f := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// v2Node returns the cgroup v2 files of a node running the pod: the root
// (no memory.max, as the kernel has none there), kubepods.slice limited
// to the allocatable memory, the QoS slice unlimited, the pod slice at
// podMax, the main container at mainMax. The pod's usage includes the
// sidecar's.
func v2Node(podMax, mainMax string) map[string]string {
	return map[string]string{
		"cgroup.controllers":                                     "cpuset cpu io memory hugetlb pids rdma misc\n",
		"cgroup.subtree_control":                                 "cpuset cpu io memory hugetlb pids\n",
		"memory.stat":                                            v2Stat,
		"kubepods.slice/memory.max":                              "16106127360\n",
		"kubepods.slice/memory.current":                          "4294967296\n",
		"kubepods.slice/memory.stat":                             v2Stat,
		"kubepods.slice/kubepods-burstable.slice/memory.max":     "max\n",
		"kubepods.slice/kubepods-burstable.slice/memory.current": "2147483648\n",
		v2Pod + "/memory.max":                                    podMax,
		v2Pod + "/memory.current":                                "985661440\n", // 940 MiB: main 200 + sidecar
		v2Pod + "/memory.stat":                                   v2Stat,        // 40 MiB inactive_file
		v2Main + "/memory.max":                                   mainMax,
		v2Main + "/memory.current":                               "209715200\n", // 200 MiB
		v2Main + "/memory.stat":                                  v2Stat,
		v2Main + "/cgroup.procs":                                 "1\n",
	}
}

// TestReadV2Tree reads cgroup v2 hierarchies written to disk, as the
// kernel lays them out, from a /proc/self/cgroup "0::/path" line, through
// Self's own code path (selfAt): the group with the least room binds
// along nested paths, "max" is no limit at any level, a cgroup namespace
// shows the container's group as the root, and systemd's named v1
// hierarchy beside the unified one does not hide it.
func TestReadV2Tree(t *testing.T) {
	hostSelf := "0::/" + v2Main + "\n"
	for _, tc := range []struct {
		name    string
		self    string
		files   map[string]string
		want    Limit
		wantErr error
	}{{
		name:  "the pod's limit binds: the sidecar uses most of it",
		self:  hostSelf,
		files: v2Node("1073741824\n", "536870912\n"),
		want:  Limit{Version: V2, Dir: v2Pod, Bytes: 1024 * mib, Usage: 940*mib - 40*mib},
	}, {
		name:  "the container's limit binds",
		self:  hostSelf,
		files: v2Node("4294967296\n", "268435456\n"),
		want:  Limit{Version: V2, Dir: v2Main, Bytes: 256 * mib, Usage: 200*mib - 40*mib},
	}, {
		name:  "container unlimited (max): the pod's limit",
		self:  hostSelf,
		files: v2Node("1073741824\n", "max\n"),
		want:  Limit{Version: V2, Dir: v2Pod, Bytes: 1024 * mib, Usage: 900 * mib},
	}, {
		name:  "pod and container unlimited: the node's allocatable (kubepods.slice)",
		self:  hostSelf,
		files: v2Node("max\n", "max\n"),
		want:  Limit{Version: V2, Dir: "kubepods.slice", Bytes: 15 << 30, Usage: 4096*mib - 40*mib},
	}, {
		name:  "systemd's named v1 hierarchy beside the unified one",
		self:  "1:name=systemd:/" + v2Main + "\n0::/" + v2Main + "\n",
		files: v2Node("1073741824\n", "max\n"),
		want:  Limit{Version: V2, Dir: v2Pod, Bytes: 1024 * mib, Usage: 900 * mib},
	}, {
		name: "cgroup namespace: the container's group is the root",
		self: "0::/\n",
		files: map[string]string{
			"cgroup.controllers": "cpu io memory pids\n",
			"memory.max":         "536870912\n",
			"memory.current":     "209715200\n",
			"memory.stat":        v2Stat,
		},
		want: Limit{Version: V2, Dir: ".", Bytes: 512 * mib, Usage: 160 * mib},
	}, {
		name:    "a process in the root group of a host: no limit",
		self:    "0::/\n",
		files:   v2Node("1073741824\n", "536870912\n"),
		wantErr: ErrNoLimit,
	}, {
		name: "every level max, up to a root without memory.max: no limit",
		self: hostSelf,
		files: func() map[string]string {
			n := v2Node("max\n", "max\n")
			n["kubepods.slice/memory.max"] = "max\n"
			return n
		}(),
		wantErr: ErrNoLimit,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := writeTree(t, tc.files)
			proc := filepath.Join(t.TempDir(), "cgroup")
			if err := os.WriteFile(proc, []byte(tc.self), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := selfAt(proc, root)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("selfAt = %+v, %v; want %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("selfAt = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	t.Run("no /proc/self/cgroup: no limit", func(t *testing.T) {
		if l, err := selfAt(filepath.Join(t.TempDir(), "absent"), t.TempDir()); !errors.Is(err, ErrNoLimit) {
			t.Fatalf("selfAt = %+v, %v; want ErrNoLimit", l, err)
		}
	})
}
