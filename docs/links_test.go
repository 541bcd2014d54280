// Package docs holds the project's documentation; its test checks that
// every relative link in the repository's Markdown resolves.
package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches an inline Markdown link or image: [text](target) or
// [text](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestRelativeLinksResolve checks every relative link of every tracked
// Markdown file: the file or folder it names exists, and an anchor
// (#section) names a heading of the Markdown file it points into.
func TestRelativeLinksResolve(t *testing.T) {
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(text))
		anchors[path] = a
		return a, nil
	}
	files := strings.Fields(string(out))
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files; expected the README and docs/", len(files))
	}
	links := 0
	for _, rel := range files {
		path := filepath.Join(root, rel)
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for lineNo, target := range relativeLinks(string(text)) {
			for _, tg := range target {
				links++
				if err := checkLink(path, tg, anchorsOf); err != nil {
					t.Errorf("%s:%d: link %q: %v", rel, lineNo, tg, err)
				}
			}
		}
	}
	if links < 50 {
		t.Fatalf("found only %d relative links; the extractor is broken", links)
	}
}

// relativeLinks returns the relative link targets of a Markdown text by
// line number, outside fenced code blocks and inline code.
func relativeLinks(text string) map[int][]string {
	links := map[int][]string{}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripInlineCode(line), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links[i+1] = append(links[i+1], target)
		}
	}
	return links
}

// stripInlineCode blanks `code spans`, where brackets are not links.
func stripInlineCode(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "`")
}

// checkLink resolves target relative to the file at from.
func checkLink(from, target string, anchorsOf func(string) (map[string]bool, error)) error {
	file, anchor, _ := strings.Cut(target, "#")
	dest := from
	if file != "" {
		dest = filepath.Join(filepath.Dir(from), file)
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("no such file or folder %s", dest)
		}
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return nil
	}
	a, err := anchorsOf(dest)
	if err != nil {
		return err
	}
	if !a[anchor] {
		return fmt.Errorf("%s has no heading with anchor #%s", filepath.Base(dest), anchor)
	}
	return nil
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, punctuation other than '-' and '_' dropped, spaces
// to '-', a repeated anchor numbered -1, -2, ….
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_':
				b.WriteRune(r)
			case unicode.IsLetter(r), unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}
