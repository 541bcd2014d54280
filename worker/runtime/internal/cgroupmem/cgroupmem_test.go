package cgroupmem

import (
	"errors"
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
