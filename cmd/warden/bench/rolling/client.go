package rolling

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"syscall"
)

// maxRetries bounds the attempts of one request.
const maxRetries = 20

// retryCodes are the error codes of a 503 with retry-after that says the
// request was never admitted (docs/operations.md, "Zero-downtime
// operations").
var retryCodes = map[string]bool{"not_ready": true, "shutting_down": true, "worker_unavailable": true, "model_unavailable": true}

// ChatBody is a streaming chat completion of prompt at temperature 0.
func ChatBody(model, prompt string, maxTokens int) []byte {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens, "temperature": 0, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	return body
}

// Stream sends a streaming chat completion (body) to url with an API key,
// retrying as the documented rules allow, and returns how it ended. A
// retry is sent at once: the load balancer's health checks have taken
// the gateway that refused out of rotation.
func Stream(ctx context.Context, client *http.Client, url, key string, body []byte) Outcome {
	var o Outcome
	for len(o.Retries) < maxRetries {
		retry, err := streamOnce(ctx, client, url, key, body, &o)
		if retry == "" {
			return o
		}
		if ctx.Err() != nil {
			o.Error = fmt.Sprintf("transport (%v)", err)
			return o
		}
		o.Retries = append(o.Retries, retry)
	}
	o.Error = "retries exhausted"
	return o
}

// streamOnce sends one attempt, filling o; it returns a reason when the
// attempt may be retried.
func streamOnce(ctx context.Context, client *http.Client, url, key string, body []byte, o *Outcome) (retry string, err error) {
	var reused bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		o.Error = "request: " + err.Error()
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection refused", err
		case reused:
			// Closed before any byte of the answer: never admitted.
			return "connection closed", err
		}
		o.Error = "transport"
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var v struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(data, &v)
		code := "unknown"
		if v.Error != nil && v.Error.Code != "" {
			code = v.Error.Code
		}
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && retryCodes[code] {
			return code, nil
		}
		o.Error = fmt.Sprintf("%d %s", resp.StatusCode, code)
		return "", nil
	}
	text, finish, err := readStream(resp.Body)
	if err != nil {
		o.Cut = true
		return "", err
	}
	o.Text, o.Finish = text, finish
	return "", nil
}

// chunk is the part of a chat.completion.chunk event this reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// readStream reads a server-sent event stream of chat chunks up to
// [DONE]: the text and finish reason, or an error if it ended first or
// carried an error event.
func readStream(r io.Reader) (text, finish string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var b strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return b.String(), finish, nil
		}
		var ch chunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return "", "", fmt.Errorf("event %q: %w", data, err)
		}
		if ch.Error != nil {
			return "", "", fmt.Errorf("error event after %q: %s: %s", b.String(), ch.Error.Code, ch.Error.Message)
		}
		if len(ch.Choices) > 0 {
			b.WriteString(ch.Choices[0].Delta.Content)
			if fr := ch.Choices[0].FinishReason; fr != nil && *fr != "" {
				finish = *fr
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("cut mid-stream after %q: %w", b.String(), err)
	}
	return "", "", fmt.Errorf("cut mid-stream after %q: %w", b.String(), io.ErrUnexpectedEOF)
}
