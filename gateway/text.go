package gateway

import (
	"strings"

	"github.com/warden-ai/warden/internal/streamtext"
	"github.com/warden-ai/warden/internal/tokenizer"
)

// maxStopBytes bounds one stop string, so that matching stays cheap per
// token whatever a client sends.
const maxStopBytes = 1024

// textStream turns a request's output token IDs into text deltas: valid
// UTF-8 only (a character split across tokens waits for its last byte),
// special tokens (EOS and other control tokens) rendered as nothing but
// those the request's parsers read (keep: [TOOL_CALLS], <think>, …), and
// stop strings applied. Text that could be the start of a stop string is
// held back until it cannot be; on a match the text is cut before the
// stop string and the stream ends.
type textStream struct {
	tok   *tokenizer.Tokenizer
	dec   *tokenizer.StreamDecoder
	stops []string
	keep  map[int32]bool // special tokens rendered as their text
	held  string         // decoded, not yet released
	ended bool           // a stop string matched
}

func newTextStream(tok *tokenizer.Tokenizer, stops []string, keep map[int32]bool) *textStream {
	return &textStream{tok: tok, dec: tokenizer.NewStreamDecoder(tok), stops: stops, keep: keep}
}

// add decodes ids and returns the text that can be released. stopped is
// true when a stop string matched: text is then the last text, and the
// caller ends the request with finish reason "stop".
func (s *textStream) add(ids []int32) (text string, stopped bool, err error) {
	if s.ended {
		return "", true, nil
	}
	var b strings.Builder
	b.WriteString(s.held)
	for _, id := range ids {
		if s.tok.IsSpecial(id) && !s.keep[id] {
			continue
		}
		piece, err := s.dec.Add(id)
		if err != nil {
			return "", false, err
		}
		b.WriteString(piece)
	}
	return s.release(b.String())
}

// flush returns the rest at the end of generation: held text, and any
// incomplete character as U+FFFD.
func (s *textStream) flush() (text string, stopped bool) {
	if s.ended {
		return "", true
	}
	text, stopped, _ = s.release(s.held + s.dec.Flush())
	if !stopped {
		text += s.held
		s.held = ""
	}
	return text, stopped
}

// release cuts pending at the first stop string, or releases all of it
// but the longest suffix that is a proper prefix of a stop string.
func (s *textStream) release(pending string) (string, bool, error) {
	cut := -1
	for _, stop := range s.stops {
		if i := strings.Index(pending, stop); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		s.held, s.ended = "", true
		return pending[:cut], true, nil
	}
	hold := 0
	for _, stop := range s.stops {
		hold = max(hold, streamtext.PartialSuffix(pending, stop))
	}
	s.held = pending[len(pending)-hold:]
	return pending[:len(pending)-hold], false, nil
}
