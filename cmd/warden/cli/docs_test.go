package cli

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docCommand is a `warden …` command line found in the documentation.
type docCommand struct {
	where string // file:line
	args  []string
}

var (
	// docCommandLine is a command line in a code block: `warden …` or
	// `go run ./cmd/warden …`, optionally after a prompt.
	docCommandLine = regexp.MustCompile(`^\s*(?:\$ )?(?:go run \./cmd/warden|warden)((?: .*)?)$`)
	// docInlineCommand is an inline code span holding a command.
	docInlineCommand = regexp.MustCompile("`(?:go run \\./cmd/warden|warden)( [^`]*)?`")
)

// TestDocumentedCommandsParse checks every `warden …` command line of the
// README and docs/ (code blocks and inline code) against the CLI: the
// command and subcommand exist, and every flag it uses is one of that
// command's flags.
func TestDocumentedCommandsParse(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var cmds []docCommand
	for _, rel := range strings.Fields(string(out)) {
		if strings.Contains(rel, "testdata/") {
			continue
		}
		cmds = append(cmds, documentedCommands(t, root, rel)...)
	}
	if len(cmds) < 40 {
		t.Fatalf("found %d documented commands; the extractor is broken", len(cmds))
	}
	usages := map[string]string{}
	usageOf := func(path []string) (string, int) {
		key := strings.Join(path, " ")
		if u, ok := usages[key]; ok {
			return u, 0
		}
		var stdout, stderr strings.Builder
		code := Main(t.Context(), append(append([]string(nil), path...), "-h"), &stdout, &stderr)
		usages[key] = stderr.String()
		return stderr.String(), code
	}
	for _, c := range cmds {
		if len(c.args) == 0 {
			continue
		}
		if c.args[0] == "--version" || c.args[0] == "-h" || c.args[0] == "--help" {
			continue
		}
		path, flags, err := commandPath(c.args)
		if err != nil {
			t.Errorf("%s: warden %s: %v", c.where, strings.Join(c.args, " "), err)
			continue
		}
		usage, code := usageOf(path)
		if code != 0 {
			t.Errorf("%s: warden %s: 'warden %s -h' exits %d: the command does not exist", c.where, strings.Join(c.args, " "), strings.Join(path, " "), code)
			continue
		}
		for _, f := range flags {
			if !strings.Contains(usage, "\n  -"+f+" ") && !strings.Contains(usage, "\n  -"+f+"\n") {
				t.Errorf("%s: warden %s: 'warden %s' has no flag -%s", c.where, strings.Join(c.args, " "), strings.Join(path, " "), f)
			}
		}
	}
}

// documentedCommands returns the command lines of the Markdown file rel.
func documentedCommands(t *testing.T, root, rel string) []docCommand {
	t.Helper()
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []docCommand
	fenced, shell := false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "```") {
			fenced = !fenced
			lang := strings.TrimPrefix(trimmed, "```")
			shell = lang == "sh" || lang == "bash" || lang == "shell" || lang == "console"
			continue
		}
		where := rel + ":" + strconv.Itoa(n)
		if !fenced {
			for _, m := range docInlineCommand.FindAllStringSubmatch(line, -1) {
				cmds = append(cmds, docCommand{where, shellWords(m[1])})
			}
			continue
		}
		m := docCommandLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := m[1]
		for strings.HasSuffix(text, `\`) && sc.Scan() {
			n++
			text = strings.TrimSuffix(text, `\`) + " " + sc.Text()
		}
		words := shellWords(text)
		// Outside shell blocks (program output, say) a line is a command
		// only if it names one.
		if !shell && (len(words) == 0 || !isCommand(words[0])) {
			continue
		}
		cmds = append(cmds, docCommand{where, words})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cmds
}

// shellWords splits a command line as a POSIX shell would for the cases
// the documentation uses: blanks, single and double quotes, and a comment
// from an unquoted " #".
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	quote := rune(0)
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			if inWord {
				words = append(words, cur.String())
			}
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// isCommand reports whether word is a top-level command.
func isCommand(word string) bool {
	for _, c := range commands() {
		if c.name == word {
			return true
		}
	}
	return false
}

// isPlaceholder reports whether a documented word stands for something to
// fill in ("…", "<id>", "PORT").
func isPlaceholder(w string) bool {
	return strings.ContainsAny(w, "…<>|") || w == "..."
}

// commandPath returns the subcommand path of a documented command line
// (e.g. [admin tenants create]) and the names of the flags it uses.
func commandPath(args []string) (path, flags []string, err error) {
	for _, a := range args {
		if strings.HasPrefix(a, "-") && len(a) > 1 && !isPlaceholder(a) {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			flags = append(flags, name)
		}
	}
	var words []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			// A connection flag's value before the admin command.
			if !strings.Contains(a, "=") && i+1 < len(args) && adminValueFlags[strings.TrimLeft(a, "-")] {
				i++
			}
			continue
		}
		words = append(words, a)
	}
	if len(words) == 0 {
		return nil, nil, errNoCommand
	}
	path = words[:1]
	switch words[0] {
	case "admin":
		if len(words) < 2 || isPlaceholder(words[1]) {
			return path, nil, nil
		}
		if len(words) == 2 && isAdminGroup(words[1]) {
			return append(path, words[1]), flags, nil
		}
		best := ""
		for _, c := range adminCommands() {
			p := strings.Fields(c.path)
			if len(p) <= len(words)-1 && strings.Join(words[1:1+len(p)], " ") == c.path && len(c.path) > len(best) {
				best = c.path
			}
		}
		if best == "" {
			return nil, nil, errUnknownSubcommand
		}
		path = append(path, strings.Fields(best)...)
	case "model", "bench", "config":
		if len(words) < 2 || isPlaceholder(words[1]) {
			return path, nil, nil
		}
		path = append(path, words[1])
	}
	return path, flags, nil
}

// adminValueFlags are the admin connection flags that take a value.
var adminValueFlags = map[string]bool{"url": true, "token": true, "token-file": true, "cacert": true, "timeout": true}

var (
	errNoCommand         = errors.New("no command")
	errUnknownSubcommand = errors.New("no such admin command")
)
