package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// maxEventBytes bounds one server-sent event line; a longer one is a
// broken stream, not a reason to buffer without limit.
const maxEventBytes = 1 << 20

// Errors a stream can end with.
var (
	// errNoDone: the stream ended without its final "data: [DONE]".
	errNoDone = errors.New("stream ended without [DONE]")
	// errEventTooLong: an event line exceeded maxEventBytes.
	errEventTooLong = errors.New("event line too long")
)

// streamResult is what one streamed completion delivered.
type streamResult struct {
	// Arrivals are the times of the chunks that carried generated text
	// (content or reasoning), in order.
	Arrivals []time.Time
	// PromptTokens and OutputTokens are the endpoint's usage; zero when
	// it sent none.
	PromptTokens, OutputTokens int64
	// Text is the generated text.
	Text string
}

// chunk is the part of a chat completion chunk the benchmark reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			Reasoning        string `json:"reasoning_content"`
			ReasoningOpenAPI string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// readStream reads a chat completion event stream from r, stamping each
// text-bearing chunk with now(). An error event, a malformed chunk, an
// overlong line or a missing [DONE] is an error; the result holds what
// arrived before it.
func readStream(r io.Reader, now func() time.Time) (streamResult, error) {
	var res streamResult
	var text bytes.Buffer
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if err != nil {
			res.Text = text.String()
			if errors.Is(err, io.EOF) {
				return res, errNoDone
			}
			return res, err
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separator, comment, event: or id: line
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			res.Text = text.String()
			return res, nil
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			res.Text = text.String()
			return res, fmt.Errorf("malformed chunk: %w", err)
		}
		if c.Error != nil {
			res.Text = text.String()
			return res, fmt.Errorf("error event: %s", c.Error.Message)
		}
		if c.Usage != nil {
			res.PromptTokens, res.OutputTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
		got := false
		for _, ch := range c.Choices {
			for _, s := range []string{ch.Delta.Reasoning, ch.Delta.ReasoningOpenAPI, ch.Delta.Content} {
				if s != "" {
					text.WriteString(s)
					got = true
				}
			}
		}
		if got {
			res.Arrivals = append(res.Arrivals, now())
		}
	}
}

// readLine returns the next line without its line ending, or
// errEventTooLong past maxEventBytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxEventBytes {
			return nil, errEventTooLong
		}
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimRight(line, "\r\n"), nil
		default:
			return nil, err
		}
	}
}
