package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/warden-ai/warden/worker"
)

// isTerminal reports whether w is a terminal: progress lines are shown
// there only, and a log file or pipe gets nothing beyond the structured
// logs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// formatSize renders n bytes with a decimal unit ("9.1 MB").
func formatSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// stepLine describes a finished start-up step of a worker.
func stepLine(s worker.Step) string {
	d := s.Duration.Round(time.Millisecond)
	switch s.Name {
	case "weights":
		line := fmt.Sprintf("loaded the model weights (%s) in %v", formatSize(s.Bytes), d)
		if s.KVBytes > 0 {
			line += fmt.Sprintf(", KV pool %s", formatSize(s.KVBytes))
		}
		return line
	case "assets":
		return fmt.Sprintf("read the tokenizer files (%s) in %v", formatSize(s.Bytes), d)
	}
	return fmt.Sprintf("%s (%s) in %v", s.Name, formatSize(s.Bytes), d)
}

// Fields of the progress events in the children's logs, text or JSON
// (a duration is text "1.5s", or in JSON logs a number of seconds).
var (
	logStep     = regexp.MustCompile(`"?step"?[=:]"?([a-z_]+)`)
	logBytes    = regexp.MustCompile(`"?bytes"?[=:](\d+)`)
	logKVBytes  = regexp.MustCompile(`"?kv_bytes"?[=:](\d+)`)
	logDuration = regexp.MustCompile(`"?duration"?[=:]"?([0-9.a-zµ]+)`)
)

// progressFromLog turns a child's log line into a progress line: its
// start-up steps ("startup step") and, for the gateway, a model's
// tokenizer loaded from the workers' assets. ok is false for other lines.
func progressFromLog(line string) (string, bool) {
	num := func(re *regexp.Regexp) int64 {
		m := re.FindStringSubmatch(line)
		if m == nil {
			return 0
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	var d time.Duration
	if m := logDuration.FindStringSubmatch(line); m != nil {
		if sec, err := strconv.ParseFloat(m[1], 64); err == nil {
			d = time.Duration(sec * float64(time.Second))
		} else {
			d, _ = time.ParseDuration(m[1])
		}
	}
	switch {
	case strings.Contains(line, "startup step"):
		m := logStep.FindStringSubmatch(line)
		if m == nil {
			return "", false
		}
		return stepLine(worker.Step{Name: m[1], Bytes: num(logBytes), KVBytes: num(logKVBytes), Duration: d}), true
	case strings.Contains(line, "model tokenizer loaded"):
		return fmt.Sprintf("loaded the model's tokenizer (%s) in %v", formatSize(num(logBytes)), d.Round(time.Millisecond)), true
	}
	return "", false
}

// logFollower reads the lines a child appends to its log file.
type logFollower struct {
	path   string
	offset int64
	rest   string // a last line not yet complete
}

// lines returns the complete lines appended since the last call.
func (f *logFollower) lines() []string {
	file, err := os.Open(f.path)
	if err != nil {
		return nil
	}
	defer file.Close()
	if _, err := file.Seek(f.offset, io.SeekStart); err != nil {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(file, 1<<20))
	if err != nil || len(data) == 0 {
		return nil
	}
	f.offset += int64(len(data))
	text := f.rest + string(data)
	end := strings.LastIndexByte(text, '\n')
	if end < 0 {
		f.rest = text
		return nil
	}
	f.rest = text[end+1:]
	var out []string
	sc := bufio.NewScanner(strings.NewReader(text[:end]))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
