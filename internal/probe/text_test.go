package probe

import (
	"strings"
	"testing"
)

func TestLeakIndexFindsForeignMarkersAndText(t *testing.T) {
	g := newTextGen(7)
	x := newLeakIndex()
	a, b := g.markedPrompt(60), g.markedPrompt(60)
	x.add("A", a)
	x.add("B", b)

	// A response repeating its own prompt is no leak.
	if l := x.check("A", a.Text); len(l) != 0 {
		t.Fatalf("own prompt reported as a leak: %+v", l)
	}
	// Another request's marker, even glued to other text, is.
	l := x.check("A", "sure: "+b.Markers[2]+"xyz and more")
	if len(l) != 1 || l[0].Source != "B" || !strings.Contains(l[0].Evidence, b.Markers[2]) {
		t.Fatalf("foreign marker: %+v", l)
	}
	// A run of another prompt's words is.
	words := strings.Fields(b.Text)
	l = x.check("A", strings.Join(words[5:20], " "))
	if len(l) != 1 || l[0].Source != "B" {
		t.Fatalf("foreign text: %+v", l)
	}
	// Unrelated gibberish is not.
	if l := x.check("A", g.words(50)); len(l) != 0 {
		t.Fatalf("fresh words reported as a leak: %+v", l)
	}
}

func FuzzLeakCheck(f *testing.F) {
	g := newTextGen(1)
	x := newLeakIndex()
	p := g.markedPrompt(20)
	x.add("B", p)
	f.Add(p.Text)
	f.Add(markerPrefix + "ABC")
	f.Fuzz(func(t *testing.T, s string) {
		_ = x.check("A", s)
	})
}
