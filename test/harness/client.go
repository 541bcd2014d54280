package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// Post sends body (bytes sent as they are, anything else as JSON) to path
// on the gateway's API with "Authorization: Bearer key" (none when key is
// empty) and Content-Type application/json. The caller closes the
// response body.
func (g *Gateway) Post(ctx context.Context, key, path string, body any) (*http.Response, error) {
	var data []byte
	switch b := body.(type) {
	case []byte:
		data = b
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.APIURL+path, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return g.HTTP.Do(req)
}

// SSE reads a text/event-stream: one Next per event's data.
type SSE struct {
	sc *bufio.Scanner
}

// NewSSE reads events from r.
func NewSSE(r io.Reader) *SSE {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &SSE{sc: sc}
}

// Next returns the next event's data (its data lines joined by "\n"), or
// io.EOF after the last one; other errors are the reader's.
func (s *SSE) Next() (string, error) {
	var data []string
	seen := false
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if seen {
				return strings.Join(data, "\n"), nil
			}
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			seen = true
		}
	}
	if err := s.sc.Err(); err != nil {
		return "", err
	}
	if seen {
		return strings.Join(data, "\n"), nil
	}
	return "", io.EOF
}
