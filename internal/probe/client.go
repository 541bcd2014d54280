package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// errBudget ends a check when the run's request budget or duration is
// spent.
var errBudget = errors.New("request budget or duration spent")

// budget bounds a run: a number of requests and a deadline.
type budget struct {
	left     atomic.Int64
	deadline time.Time
}

// take spends one request; false when none is left or time is up.
func (b *budget) take() bool {
	if !b.deadline.IsZero() && time.Now().After(b.deadline) {
		return false
	}
	return b.left.Add(-1) >= 0
}

// client talks to one OpenAI-compatible endpoint with one API key.
type client struct {
	base   string // ends in /v1
	key    string
	label  string // "A", "B": how reports name the key
	http   *http.Client
	budget *budget
}

// abortMode says when a request is abandoned by closing its connection.
type abortMode int

const (
	abortNone      abortMode = iota
	abortMidPrompt           // the body is half sent when the connection closes
	abortMidStream           // after some streamed events
	// abortAfterDelay: the whole body is sent, and the connection closes
	// AbortDelay after sending began, wherever the request then is —
	// typically while its prompt is computed and its KV transferred.
	abortAfterDelay
)

// chatRequest is what the probe asks.
type chatRequest struct {
	Model     string
	Prompt    string
	MaxTokens int
	// Extra fields merged into the JSON body (client-steered fields).
	Extra map[string]any
	Abort abortMode
	// AbortAfter is the number of streamed events before abortMidStream.
	AbortAfter int
	// AbortDelay is when abortAfterDelay hangs up, from sending.
	AbortDelay time.Duration
	// OneRetry retries a 429 or 503 once instead of maxRetries times:
	// for a prompt past the context, whose first answer other than 400
	// is already the evidence.
	OneRetry bool
}

// chatResult is what came back.
type chatResult struct {
	Status  int
	ErrCode string
	ErrMsg  string
	Text    string
	// PromptTokens, CompletionTokens: the usage the endpoint reported
	// (-1 when it sent none).
	PromptTokens     int
	CompletionTokens int
	// TTFT is the time from sending the request to the first streamed
	// event with content (or the whole answer's arrival when none had).
	TTFT    time.Duration
	Aborted bool
	// Complete: the stream ended with [DONE].
	Complete bool
	// retryAfter is the error response's retry-after header (0: none).
	retryAfter time.Duration
}

// maxRetries bounds how often a 429 or 503 is retried after its
// retry-after.
const maxRetries = 4

// retryable: a 429, or a 503 that says when to come back, is what a
// well-behaved client retries.
func retryable(res chatResult) bool {
	return res.Status == http.StatusTooManyRequests || res.Status == http.StatusServiceUnavailable && res.retryAfter > 0
}

// chat sends one streamed chat completion at temperature 0 and returns the
// streamed answer. A 429 is retried after its retry-after (bounded); every
// try spends budget.
func (c *client) chat(ctx context.Context, req chatRequest) (chatResult, error) {
	for try := 0; ; try++ {
		if !c.budget.take() {
			return chatResult{}, errBudget
		}
		res, err := c.chatOnce(ctx, req)
		limit := maxRetries
		if req.OneRetry {
			limit = 1
		}
		if err != nil || !retryable(res) || try >= limit {
			return res, err
		}
		wait := res.retryAfter
		if wait == 0 {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (c *client) body(req chatRequest) ([]byte, error) {
	m := map[string]any{
		"model":          req.Model,
		"messages":       []map[string]string{{"role": "user", "content": req.Prompt}},
		"max_tokens":     req.MaxTokens,
		"temperature":    0,
		"seed":           1234,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	}
	for k, v := range req.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

func (c *client) chatOnce(ctx context.Context, req chatRequest) (chatResult, error) {
	res := chatResult{PromptTokens: -1, CompletionTokens: -1}
	body, err := c.body(req)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var rd io.Reader = bytes.NewReader(body)
	if req.Abort == abortMidPrompt {
		// Send half the body, then hang up: the server sees a client gone
		// while it is still reading the prompt.
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(body[:len(body)/2])
			cancel()
			_ = pw.CloseWithError(context.Canceled)
		}()
		rd = pr
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/chat/completions", rd)
	if err != nil {
		return res, err
	}
	hreq.Header.Set("Authorization", "Bearer "+c.key)
	hreq.Header.Set("Content-Type", "application/json")
	if req.Abort != abortMidPrompt {
		hreq.ContentLength = int64(len(body))
	}
	start := time.Now()
	if req.Abort == abortAfterDelay {
		t := time.AfterFunc(req.AbortDelay, cancel)
		defer t.Stop()
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		if req.Abort == abortMidPrompt || req.Abort == abortAfterDelay && ctx.Err() != nil {
			res.Aborted = true
			return res, nil
		}
		return res, err
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		res.ErrCode, res.ErrMsg = readError(resp.Body)
		res.retryAfter = retryAfter(resp.Header)
		return res, nil
	}
	var text strings.Builder
	events := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		line = strings.TrimSpace(line)
		if line == "[DONE]" {
			res.Complete = true
			break
		}
		var ev streamEvent
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.Error != nil {
			res.ErrCode, res.ErrMsg = ev.Error.Code, ev.Error.Message
			break
		}
		for _, ch := range ev.Choices {
			if ch.Delta.Content != "" && res.TTFT == 0 {
				res.TTFT = time.Since(start)
			}
			text.WriteString(ch.Delta.Content)
		}
		if ev.Usage != nil {
			res.PromptTokens, res.CompletionTokens = ev.Usage.PromptTokens, ev.Usage.CompletionTokens
		}
		events++
		if req.Abort == abortMidStream && events >= req.AbortAfter {
			res.Aborted = true
			cancel()
			break
		}
	}
	if res.TTFT == 0 {
		res.TTFT = time.Since(start)
	}
	if req.Abort == abortAfterDelay && !res.Complete && ctx.Err() != nil {
		res.Aborted = true
	}
	res.Text = text.String()
	if err := sc.Err(); err != nil && !res.Aborted && ctx.Err() == nil {
		return res, fmt.Errorf("reading the stream: %w", err)
	}
	return res, nil
}

// streamEvent is the part of a chat.completion.chunk (or a mid-stream
// error) the probe reads.
type streamEvent struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *apiError `json:"error"`
}

// apiError is OpenAI's error object.
type apiError struct {
	Message string `json:"message"`
	Code    string `json:"code"`
}

// readError reads an error envelope (code and message; empty when the body
// is not one).
func readError(r io.Reader) (code, msg string) {
	var env struct {
		Error *apiError `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	if json.Unmarshal(b, &env) != nil || env.Error == nil {
		return "", strings.TrimSpace(string(b))
	}
	return env.Error.Code, env.Error.Message
}

// retryAfter reads a retry-after header in seconds, bounded to
// [0.1 s, 30 s]; 0 when there is none.
func retryAfter(h http.Header) time.Duration {
	s, err := strconv.ParseFloat(h.Get("retry-after"), 64)
	if err != nil {
		return 0
	}
	return min(max(time.Duration(s*float64(time.Second)), 100*time.Millisecond), 30*time.Second)
}

// modelInfo is an entry of /v1/models.
type modelInfo struct {
	ID            string `json:"id"`
	ContextLength int    `json:"context_length"`
	// Other spellings endpoints use for the same figure.
	MaxModelLen int `json:"max_model_len"`
}

// models lists the endpoint's models.
func (c *client) models(ctx context.Context) ([]modelInfo, error) {
	if !c.budget.take() {
		return nil, errBudget
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		code, msg := readError(resp.Body)
		return nil, fmt.Errorf("GET /models with key %s: %d %s %s", c.label, resp.StatusCode, code, msg)
	}
	var list struct {
		Data []modelInfo `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("GET /models: %w", err)
	}
	for i := range list.Data {
		if list.Data[i].ContextLength == 0 {
			list.Data[i].ContextLength = list.Data[i].MaxModelLen
		}
	}
	return list.Data, nil
}
