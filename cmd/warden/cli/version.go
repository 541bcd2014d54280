package cli

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// buildInfo is what `warden version` reports of the running binary.
type buildInfo struct {
	// version: Version when set at build time, else the main module's
	// version ("(devel)" in a checkout).
	version string
	// commit and date of the source, with "+dirty" for uncommitted
	// changes; empty when the build recorded no VCS state.
	commit, date string
	goVersion    string
	// tags are the build tags (-tags), "" for none.
	tags string
}

// readBuildInfo collects buildInfo from the binary's embedded build
// information (runtime/debug).
func readBuildInfo() buildInfo {
	b := buildInfo{version: Version, goVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if b.version == "dev" && bi.Main.Version != "" {
		b.version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.commit = s.Value
		case "vcs.time":
			b.date = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		case "-tags":
			b.tags = s.Value
		}
	}
	if dirty && b.commit != "" {
		b.commit += "+dirty"
	}
	return b
}

// write prints b, one field a line.
func (b buildInfo) write(w io.Writer) {
	unknown := func(s string) string {
		if s == "" {
			return "unknown (built without VCS information)"
		}
		return s
	}
	tags := b.tags
	if tags == "" {
		tags = "none (cpu backend only)"
	}
	fmt.Fprintf(w, "warden %s\n", b.version)
	fmt.Fprintf(w, "  commit      %s\n", unknown(b.commit))
	fmt.Fprintf(w, "  commit date %s\n", unknown(b.date))
	fmt.Fprintf(w, "  go          %s %s/%s\n", b.goVersion, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "  build tags  %s\n", strings.ReplaceAll(tags, ",", " "))
}

// runVersion prints the binary's version, commit, commit date, Go version
// and build tags (also `warden --version`).
func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "version")
	if err := parse(fs, args); err != nil {
		return err
	}
	readBuildInfo().write(e.stdout)
	return nil
}
