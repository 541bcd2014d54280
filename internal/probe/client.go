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
	"slices"
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
	// retries counts transport errors retried (and 429/503 waits).
	retries atomic.Int64
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
	// Messages replace the one user message of Prompt (multi-turn, tool
	// results).
	Messages []map[string]any
	// N is the number of choices (0: the endpoint's default, one).
	N int
	// Plain asks for one JSON answer instead of a stream.
	Plain bool
	// Responses sends the prompt to /v1/responses instead of
	// /v1/chat/completions (never streamed).
	Responses bool
	// AnyStatus: an answer other than 200 is the check's to judge (it
	// does not end the check).
	AnyStatus bool
}

// chatResult is what came back.
type chatResult struct {
	Status  int
	ErrCode string
	ErrMsg  string
	// Text is every choice's text, in index order, joined by newlines.
	Text string
	// ID is the response's id (the first chunk's, when streamed); OtherIDs
	// are further ids seen in chunks of the same stream.
	ID       string
	OtherIDs []string
	// PromptTokens, CompletionTokens, CachedTokens: the usage the
	// endpoint reported (-1 when it sent none).
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
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
// retry-after, and how often a transport error (a dropped connection,
// EOF) is retried after a backoff of transportBackoff, doubling.
const (
	maxRetries       = 4
	transportBackoff = 250 * time.Millisecond
)

// retryable: a 429, or a 503 that says when to come back, is what a
// well-behaved client retries.
func retryable(res chatResult) bool {
	return res.Status == http.StatusTooManyRequests || res.Status == http.StatusServiceUnavailable && res.retryAfter > 0
}

// chat sends one chat completion (streamed unless req.Plain) at
// temperature 0. A 429 (or a 503 with retry-after) is retried after its
// retry-after, a transport error after a doubling backoff, both bounded
// and counted; every try spends budget. A request the probe aborted on
// purpose is not retried.
func (c *client) chat(ctx context.Context, req chatRequest) (chatResult, error) {
	limit := maxRetries
	if req.OneRetry {
		limit = 1
	}
	for try := 0; ; try++ {
		if !c.budget.take() {
			return chatResult{}, errBudget
		}
		res, err := c.chatOnce(ctx, req)
		var wait time.Duration
		switch {
		case ctx.Err() != nil || try >= limit:
			return res, err
		case err != nil && !res.Aborted:
			wait = transportBackoff << try
		case err == nil && retryable(res):
			if wait = res.retryAfter; wait == 0 {
				wait = time.Second
			}
		default:
			return res, err
		}
		c.budget.retries.Add(1)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (c *client) body(req chatRequest) ([]byte, error) {
	msgs := req.Messages
	if msgs == nil {
		msgs = []map[string]any{{"role": "user", "content": req.Prompt}}
	}
	m := map[string]any{
		"model":       req.Model,
		"messages":    msgs,
		"max_tokens":  req.MaxTokens,
		"temperature": 0,
		"seed":        1234,
	}
	if req.Responses {
		delete(m, "messages")
		delete(m, "max_tokens")
		m["input"], m["max_output_tokens"] = req.Prompt, req.MaxTokens
	} else if !req.Plain {
		m["stream"] = true
		m["stream_options"] = map[string]bool{"include_usage": true}
	}
	if req.N > 0 {
		m["n"] = req.N
	}
	for k, v := range req.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

func (c *client) chatOnce(ctx context.Context, req chatRequest) (chatResult, error) {
	res := chatResult{PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}
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
	path := "/chat/completions"
	if req.Responses {
		path = "/responses"
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, rd)
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
	if req.Plain || req.Responses {
		return readPlain(resp.Body, req.Responses, start, res)
	}
	texts := map[int]*strings.Builder{}
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
		res.noteID(ev.ID)
		for _, ch := range ev.Choices {
			if ch.Delta.Content != "" && res.TTFT == 0 {
				res.TTFT = time.Since(start)
			}
			if texts[ch.Index] == nil {
				texts[ch.Index] = &strings.Builder{}
			}
			texts[ch.Index].WriteString(ch.Delta.Content)
		}
		if ev.Usage != nil {
			res.setUsage(*ev.Usage)
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
	res.Text = joinChoices(texts)
	if err := sc.Err(); err != nil && !res.Aborted && ctx.Err() == nil {
		return res, fmt.Errorf("reading the stream: %w", err)
	}
	return res, nil
}

// noteID records a chunk's response id: the first is the stream's, any
// other is a chunk of another response in this stream.
func (r *chatResult) noteID(id string) {
	switch {
	case id == "" || id == r.ID:
	case r.ID == "":
		r.ID = id
	case !slices.Contains(r.OtherIDs, id):
		r.OtherIDs = append(r.OtherIDs, id)
	}
}

func (r *chatResult) setUsage(u usage) {
	r.PromptTokens, r.CompletionTokens = u.PromptTokens+u.InputTokens, u.CompletionTokens+u.OutputTokens
	r.CachedTokens = 0
	if u.PromptDetails != nil {
		r.CachedTokens += u.PromptDetails.CachedTokens
	}
	if u.InputDetails != nil {
		r.CachedTokens += u.InputDetails.CachedTokens
	}
}

// joinChoices joins the choices' texts in index order.
func joinChoices(texts map[int]*strings.Builder) string {
	idx := make([]int, 0, len(texts))
	for i := range texts {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	parts := make([]string, len(idx))
	for k, i := range idx {
		parts[k] = texts[i].String()
	}
	return strings.Join(parts, "\n")
}

// readPlain reads a JSON chat completion or Responses API response.
func readPlain(body io.Reader, responses bool, start time.Time, res chatResult) (chatResult, error) {
	var v struct {
		ID      string `json:"id"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Usage *usage `json:"usage"`
	}
	b, err := io.ReadAll(io.LimitReader(body, 16<<20))
	res.TTFT = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("reading the answer: %w", err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return res, fmt.Errorf("decoding the answer: %w", err)
	}
	res.Complete, res.ID = true, v.ID
	texts := map[int]*strings.Builder{}
	for _, ch := range v.Choices {
		texts[ch.Index] = &strings.Builder{}
		texts[ch.Index].WriteString(ch.Message.Content)
	}
	if responses {
		var sb strings.Builder
		for _, o := range v.Output {
			for _, c := range o.Content {
				sb.WriteString(c.Text)
			}
		}
		texts[0] = &sb
	}
	res.Text = joinChoices(texts)
	if v.Usage != nil {
		res.setUsage(*v.Usage)
	}
	return res, nil
}

// streamEvent is the part of a chat.completion.chunk (or a mid-stream
// error) the probe reads.
type streamEvent struct {
	ID      string `json:"id"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *usage    `json:"usage"`
	Error *apiError `json:"error"`
}

// usage is a chat completion's or a response's usage.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	InputTokens      int `json:"input_tokens"`
	OutputTokens     int `json:"output_tokens"`
	PromptDetails    *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
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

// do sends a GET of path with c's key, spending budget, and retries a
// transport error like chat does.
func (c *client) do(ctx context.Context, path string) (*http.Response, error) {
	for try := 0; ; try++ {
		if !c.budget.take() {
			return nil, errBudget
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		resp, err := c.http.Do(req)
		if err == nil || ctx.Err() != nil || try >= maxRetries {
			return resp, err
		}
		c.budget.retries.Add(1)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(transportBackoff << try):
		}
	}
}

// models lists the endpoint's models.
func (c *client) models(ctx context.Context) ([]modelInfo, error) {
	resp, err := c.do(ctx, "/models")
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
