package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxEventBytes bounds one server-sent event line.
const maxEventBytes = 1 << 20

// errNoDone is reported when a stream ends without its [DONE] event.
var errNoDone = errors.New("stream ended before [DONE]")

// eventReader reads the data of server-sent events from an OpenAI-style
// stream, one "data:" line per event.
type eventReader struct {
	sc *bufio.Scanner
}

func newEventReader(r io.Reader) *eventReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes)
	return &eventReader{sc: sc}
}

// next returns the data of the next event. At the end of the stream it
// returns io.EOF; comment, id and event lines are skipped.
func (e *eventReader) next() ([]byte, error) {
	for e.sc.Scan() {
		line := e.sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		return bytes.TrimSpace(data), nil
	}
	if err := e.sc.Err(); err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	return nil, io.EOF
}

// isDone reports the stream's terminating event.
func isDone(data []byte) bool { return bytes.Equal(data, []byte("[DONE]")) }

// chunk is the part of a chat or text completion chunk the client reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
}

// hasContent reports whether an event carries generated text: the client's
// first token. A role-only delta or a usage-only chunk carries none.
func hasContent(data []byte) bool {
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return false
	}
	for _, ch := range c.Choices {
		if ch.Delta.Content != "" || ch.Text != "" {
			return true
		}
	}
	return false
}
