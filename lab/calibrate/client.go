package calibrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// record is what the client saw of one request. Times are offsets from the
// run's start; unset ones are -1.
type record struct {
	step int // index into the steps; stepWarmup or stepProbe
	// round is a probe request's round.
	round int
	shape Shape
	sent  time.Duration
	// first and last are the arrivals of the first and the last chunk carrying
	// text; done the end of the stream (or the error).
	first, last, done time.Duration
	// prompt and tokens are the prompt and output lengths the engine reported
	// (stream_options.include_usage), else the shape's and the chunks counted.
	prompt, tokens int
	// times are the arrivals of the chunks carrying text, kept for the
	// context probe's requests only.
	times []time.Duration
	err   error
}

// ttft returns the time to first token, false when none came.
func (r *record) ttft() (time.Duration, bool) {
	if r.first < 0 {
		return 0, false
	}
	return r.first - r.sent, true
}

// completionChunk is the part of an OpenAI completions stream chunk the client
// reads.
type completionChunk struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// promptText returns a prompt of about n tokens (one short word each, as the
// end-to-end load generator writes them) that starts with a prefix unique to
// request id, so that an engine with prefix caching computes every prompt.
func promptText(n, id int) string {
	prefix := fmt.Sprintf("%07d ", id%10_000_000) // 8 characters: 2 tokens at 4 characters each
	if n <= 2 {
		return prefix[:4*n-1]
	}
	return prefix + strings.Repeat("tok ", n-2)
}

// body returns the JSON body of a streaming completion of shape s for request id.
func (r *runner) body(s Shape, id int) ([]byte, error) {
	b := map[string]any{
		"model":          r.model,
		"prompt":         promptText(s.PromptTokens, id),
		"max_tokens":     s.OutputTokens,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"temperature":    0,
	}
	if r.cfg.IgnoreEOS {
		b["ignore_eos"] = true
	}
	return json.Marshal(b)
}

// complete sends one streaming completion and fills rec. It works on a copy
// and publishes it under r.mu when the request is sent, at its first token and
// at its end, so that a step can be judged while requests are in flight.
func (r *runner) complete(ctx context.Context, rec *record, id int) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	loc := *rec
	loc.first, loc.last, loc.done = -1, -1, -1
	loc.prompt = loc.shape.PromptTokens
	publish := func() {
		r.mu.Lock()
		*rec = loc
		r.mu.Unlock()
	}
	defer publish()
	fail := func(err error) {
		loc.err = err
		loc.done = r.since()
	}
	resp, err := r.send(ctx, loc.shape, id)
	if err != nil {
		fail(err)
		return
	}
	defer resp.Body.Close()
	chunks, usageTokens, err := r.readStream(resp.Body, &loc, publish)
	if err != nil {
		fail(err)
		return
	}
	loc.tokens = chunks
	if usageTokens >= 0 {
		loc.tokens = usageTokens
	}
	loc.done = r.since()
	if loc.first < 0 {
		loc.err = errors.New("the stream ended without a token")
	}
}

// send POSTs a streaming completion of shape s for request id and returns the
// response, whose status is 200. Errors: the request cannot be built or sent,
// or another status (with the start of its body).
func (r *runner) send(ctx context.Context, s Shape, id int) (*http.Response, error) {
	body, err := r.body(s, id)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.completionsURL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", r.completionsURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("POST %s: %s: %s", r.completionsURL, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// readStream reads the server-sent events of a completion until [DONE] or the
// end of the stream. It sets loc's first and last token times as text chunks
// arrive (publishing loc at the first) and its prompt tokens from the usage
// chunk, and returns the text chunks and the usage's completion tokens (-1
// without a usage chunk). Errors: a chunk that is not JSON, an error chunk, a
// usage count below 0, or a broken stream.
func (r *runner) readStream(body io.Reader, loc *record, publish func()) (chunks, usageTokens int, err error) {
	usageTokens = -1
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := br.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if string(data) == "[DONE]" {
				return chunks, usageTokens, nil
			}
			var c completionChunk
			if jerr := json.Unmarshal(data, &c); jerr != nil {
				return 0, 0, fmt.Errorf("stream chunk %q: %w", truncate(data, 80), jerr)
			}
			if c.Error != nil {
				return 0, 0, fmt.Errorf("stream error: %s", c.Error.Message)
			}
			if len(c.Choices) > 0 && c.Choices[0].Text != "" {
				now := r.since()
				loc.last = now
				chunks++
				if loc.step == stepProbe {
					loc.times = append(loc.times, now)
				}
				if loc.first < 0 {
					loc.first = now
					publish()
				}
			}
			if c.Usage != nil {
				if c.Usage.PromptTokens < 0 || c.Usage.CompletionTokens < 0 {
					return 0, 0, fmt.Errorf("stream usage: %d prompt and %d completion tokens: a count below 0", c.Usage.PromptTokens, c.Usage.CompletionTokens)
				}
				loc.prompt, usageTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
			}
		}
		if errors.Is(err, io.EOF) {
			return chunks, usageTokens, nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reading the stream: %w", err)
		}
	}
}

// truncate returns b as a string, cut to n bytes and marked with an ellipsis
// when longer.
func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// modelInfo is what GET /v1/models says of the first model served.
type modelInfo struct {
	id          string
	maxModelLen int // 0 when not reported
}

// fetchModel asks GET base/v1/models for the first model served (vLLM also
// reports its max_model_len there).
func fetchModel(ctx context.Context, client *http.Client, base string) (modelInfo, error) {
	u, err := url.JoinPath(base, "v1", "models")
	if err != nil {
		return modelInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return modelInfo{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return modelInfo{}, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return modelInfo{}, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return modelInfo{}, fmt.Errorf("GET %s: decoding the model list: %w", u, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return modelInfo{}, fmt.Errorf("GET %s: no model served", u)
	}
	return modelInfo{id: list.Data[0].ID, maxModelLen: list.Data[0].MaxModelLen}, nil
}
