// Command testreport reads `go test -json` on stdin and prints what a plain
// `go test` would (the output of failed tests, one ok/FAIL line per
// package), then the slowest tests of the run. scripts/test.sh pipes the
// suite through it:
//
//	go test -json ./... | go run ./scripts/testreport -slowest 15
//
// It exits 1 if a test or package failed, or if the input ended with a
// test that never finished (a crash or a timeout).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// testMessage matches a line written by t.Log, t.Error or t.Fatal: an
// indented file:line prefix.
var testMessage = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: `)

// maxMessages bounds the messages kept per failed test, and maxMessageLen
// each message, so that the summary stays short enough to read in a CI
// log's tail.
const (
	maxMessages   = 12
	maxMessageLen = 400
)

// timing is how long one test (or subtest) took.
type timing struct {
	name    string
	seconds float64
}

func main() {
	slowest := flag.Int("slowest", 15, "how many of the slowest tests to list")
	flag.Parse()
	failed, err := report(os.Stdin, os.Stdout, *slowest)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// report copies the result of the events on in to out and reports whether
// anything failed.
func report(in io.Reader, out io.Writer, slowest int) (failed bool, err error) {
	type key struct{ pkg, test string }
	pending := map[key][]string{} // output of tests still running
	var times []timing
	var messages []string // of failed tests, for the summary at the end
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Action == "" {
			fmt.Fprintln(out, sc.Text()) // build errors and other plain lines
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			if e.Test == "" {
				// Package-level lines: keep the ok/FAIL summaries and
				// anything printed outside a test (a panic, TestMain).
				if !strings.HasPrefix(e.Output, "PASS") && !strings.HasPrefix(e.Output, "=== ") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			pending[k] = append(pending[k], e.Output)
		case "pass", "skip":
			if e.Test != "" {
				if e.Action == "pass" {
					times = append(times, timing{e.Package + " " + e.Test, e.Elapsed})
				}
				delete(pending, k)
			}
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "fail":
			failed = true
			if e.Test != "" {
				fmt.Fprint(out, strings.Join(pending[k], ""))
				times = append(times, timing{e.Package + " " + e.Test + " (FAILED)", e.Elapsed})
				messages = append(messages, failureMessages(e.Test, pending[k])...)
				delete(pending, k)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	for k, lines := range pending {
		failed = true
		fmt.Fprintf(out, "--- %s %s never finished:\n%s", k.pkg, k.test, strings.Join(lines, ""))
	}
	if len(messages) > 0 {
		fmt.Fprintf(out, "\nfailure messages:\n%s", strings.Join(messages, ""))
	}
	sort.Slice(times, func(i, j int) bool { return times[i].seconds > times[j].seconds })
	if len(times) > slowest {
		times = times[:slowest]
	}
	if len(times) > 0 {
		fmt.Fprintf(out, "\nslowest tests:\n")
		for _, t := range times {
			fmt.Fprintf(out, "%8.2fs  %s\n", t.seconds, t.name)
		}
	}
	return failed, nil
}

// failureMessages returns the test's own messages among its output lines,
// each prefixed with the test's name.
func failureMessages(test string, lines []string) []string {
	var msgs []string
	for _, l := range lines {
		if !testMessage.MatchString(l) {
			continue
		}
		if len(msgs) == maxMessages {
			return append(msgs, fmt.Sprintf("  %s: ... more\n", test))
		}
		l = strings.TrimSpace(l)
		if len(l) > maxMessageLen {
			l = l[:maxMessageLen] + "..."
		}
		msgs = append(msgs, fmt.Sprintf("  %s: %s\n", test, l))
	}
	return msgs
}
