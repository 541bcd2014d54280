package constrain

// Matches reports whether the grammar accepts all of s.
func (g *Grammar) Matches(s string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := pos{s: g.start}
	for i := 0; i < len(s); i++ {
		p = g.feed(p, s[i])
	}
	return p.n == 0 && p.s.accept
}

// MinLen is the length in bytes of the shortest output.
func (g *Grammar) MinLen() int { return int(g.start.dist) }
