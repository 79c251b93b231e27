package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/klog/v2"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// defaultMaxTokens is max_tokens when a completion request gives none: 16, the
// default of OpenAI's legacy completions API and of vLLM's /v1/completions.
const defaultMaxTokens = 16

// completionRequest is the body of POST /v1/completions: the OpenAI fields the
// emulator uses, plus two extensions for exact load generation.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// PromptTokens (extension) gives the prompt length in tokens exactly,
	// overriding the estimate from the prompt text; the prompt may then be empty.
	PromptTokens *int `json:"prompt_tokens"`
	// OutputTokens (extension) makes the emulated model emit end-of-sequence after
	// this many tokens (finish_reason "stop") when it is below max_tokens.
	OutputTokens *int `json:"output_tokens"`
}

type choice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completionResponse struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage"`
}

// promptLength returns the prompt's length in tokens: exact for token-id
// prompts, ceil(characters / charsPerToken) (at least 1) for text.
func promptLength(raw json.RawMessage, charsPerToken int) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, errors.New("prompt is required")
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return max(1, (utf8.RuneCountInString(text)+charsPerToken-1)/charsPerToken), nil
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil {
		if len(texts) != 1 {
			return 0, fmt.Errorf("batched prompts are not supported: got %d prompts", len(texts))
		}
		return promptLength(json.RawMessage(mustJSON(texts[0])), charsPerToken)
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		return len(ids), nil
	}
	var batches [][]int
	if err := json.Unmarshal(raw, &batches); err == nil {
		if len(batches) != 1 || len(batches[0]) == 0 {
			return 0, fmt.Errorf("batched prompts are not supported: got %d prompts", len(batches))
		}
		return len(batches[0]), nil
	}
	return 0, errors.New("prompt must be a string, a list of one string, or a list of token ids")
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// tokenText is the text of output token i: a 4-character word, so that the
// output's length matches the 4-characters-per-token estimate.
func tokenText(i int) string {
	words := [...]string{" the", " and", " for", " you", " can", " was", " are", " one"}
	return words[i%len(words)]
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if req.Model != "" && req.Model != s.cfg.ModelName {
		writeErrorType(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	var prompt int
	if req.PromptTokens != nil {
		prompt = *req.PromptTokens
	} else {
		var err error
		if prompt, err = promptLength(req.Prompt, s.cfg.CharsPerToken); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	maxTokens := defaultMaxTokens
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	stopAfter := 0
	if req.OutputTokens != nil {
		if *req.OutputTokens < 1 {
			writeError(w, http.StatusBadRequest, "output_tokens must be >= 1")
			return
		}
		stopAfter = *req.OutputTokens
	}
	id := s.newID()
	engine, runner, stream, err := s.submit(emulator.Request{ID: id, PromptTokens: prompt, MaxTokens: maxTokens, StopAfter: stopAfter})
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, emulator.ErrInvalidRequest) {
			status = http.StatusBadRequest
		}
		writeError(w, status, err.Error())
		return
	}
	klog.V(4).InfoS("Completion queued", "id", id, "engine", engine, "promptTokens", prompt, "maxTokens", maxTokens, "stream", req.Stream)
	created := time.Now().Unix()
	if req.Stream {
		s.streamCompletion(w, r, runner, stream, id, created, prompt, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	for {
		tokens, reason, done := stream.Progress()
		if done {
			var text strings.Builder
			for i := range tokens {
				text.WriteString(tokenText(i))
			}
			fr := string(reason)
			writeJSON(w, http.StatusOK, completionResponse{
				ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName,
				Choices: []choice{{Text: text.String(), FinishReason: &fr}},
				Usage:   &usage{PromptTokens: prompt, CompletionTokens: tokens, TotalTokens: prompt + tokens},
			})
			return
		}
		select {
		case <-stream.Changed():
		case <-r.Context().Done():
			runner.Abort(id)
			return
		}
	}
}

// streamCompletion writes server-sent events, one chunk per token as vLLM does;
// the last token's chunk carries the finish reason.
func (s *Server) streamCompletion(w http.ResponseWriter, r *http.Request, runner *emulator.Runner, stream *emulator.Stream,
	id string, created int64, prompt int, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return nil
	}
	sent := 0
	for {
		tokens, reason, done := stream.Progress()
		for ; sent < tokens; sent++ {
			c := choice{Text: tokenText(sent)}
			if done && sent == tokens-1 {
				fr := string(reason)
				c.FinishReason = &fr
			}
			if err := send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName, Choices: []choice{c}}); err != nil {
				runner.Abort(id)
				return
			}
		}
		if done {
			if tokens == 0 { // aborted before any token
				fr := string(reason)
				_ = send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName, Choices: []choice{{FinishReason: &fr}}})
			}
			if includeUsage {
				_ = send(completionResponse{ID: id, Object: "text_completion", Created: created, Model: s.cfg.ModelName, Choices: []choice{},
					Usage: &usage{PromptTokens: prompt, CompletionTokens: tokens, TotalTokens: prompt + tokens}})
			}
			_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-stream.Changed():
		case <-r.Context().Done():
			runner.Abort(id)
			return
		}
	}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.cfg.ModelName, "object": "model", "owned_by": "vllm", "root": s.cfg.ModelName,
			"max_model_len": s.cfg.Engine.MaxModelLen,
		}},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers in vLLM's OpenAI-compatible error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeErrorType(w, status, "BadRequestError", msg)
}

func writeErrorType(w http.ResponseWriter, status int, typ, msg string) {
	if status >= 500 {
		typ = "InternalServerError"
	}
	writeJSON(w, status, map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": status})
}
