// Package trace reads LLM request-arrival traces: one row per request with its
// arrival time and its prompt and output length in tokens. It is the project's
// one trace reader: lab/emulator's replay benchmarks, the end-to-end load
// generator and the demo (test/e2e, through loadgen.FromTrace) read traces with
// it.
//
// The format is the one of the Azure LLM inference traces published with the
// Splitwise paper (Patel et al., ISCA 2024; CC-BY 4.0):
//
//	TIMESTAMP,ContextTokens,GeneratedTokens
//	2023-11-16 18:15:46.6805900,374,44
//
// Timestamps are UTC wall-clock times with up to nine fractional digits.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// TimestampLayout is the layout of the TIMESTAMP column (UTC, fraction optional,
// up to nine digits; the published files carry seven).
const TimestampLayout = "2006-01-02 15:04:05.999999999"

// Request is one row of a trace.
type Request struct {
	// Time is the arrival time of the request (UTC).
	Time time.Time
	// Offset is the arrival time relative to the earliest request of the trace,
	// >= 0; rows need not be sorted, and the earliest has Offset 0.
	Offset time.Duration
	// PromptTokens is the prompt ("context") length in tokens, >= 1.
	PromptTokens int
	// OutputTokens is the number of generated tokens, >= 1.
	OutputTokens int
}

// Trace is a whole trace in file order.
type Trace struct {
	// Requests are the rows in file order.
	Requests []Request
}

// MaxSpan is the longest time a trace may span, from its earliest to its
// latest arrival: 31 days. The published Azure traces span one hour (2023) and
// one week (2024); a longer span is a mistyped timestamp, and replaying it on a
// virtual clock would run for hours.
const MaxSpan = 31 * 24 * time.Hour

// Duration is the time from the earliest to the latest arrival, 0 for fewer
// than two requests.
func (t Trace) Duration() time.Duration {
	var d time.Duration
	for _, r := range t.Requests {
		d = max(d, r.Offset)
	}
	return d
}

// Read parses a trace in the Azure LLM inference trace format from r. The header
// row is required and matched case-insensitively. It fails with the line number on
// the first malformed row: a bad timestamp, a non-integer token count, a prompt
// length below 1 or an output length below 1; and on a trace spanning more than
// MaxSpan.
func Read(r io.Reader) (Trace, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Trace{}, errors.New("reading trace: empty input, want a header row")
		}
		return Trace{}, fmt.Errorf("reading trace header: %w", err)
	}
	want := []string{"timestamp", "contexttokens", "generatedtokens"}
	for i, h := range header {
		if strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))) != want[i] {
			return Trace{}, fmt.Errorf("reading trace header: column %d is %q, want %q", i+1, h, want[i])
		}
	}
	var t Trace
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Trace{}, fmt.Errorf("reading trace: %w", err)
		}
		at, err := time.ParseInLocation(TimestampLayout, strings.TrimSpace(rec[0]), time.UTC)
		if err != nil {
			return Trace{}, fmt.Errorf("trace line %d: timestamp: %w", line, err)
		}
		prompt, err := strconv.Atoi(strings.TrimSpace(rec[1]))
		if err != nil || prompt < 1 {
			return Trace{}, fmt.Errorf("trace line %d: ContextTokens %q: want an integer >= 1", line, rec[1])
		}
		output, err := strconv.Atoi(strings.TrimSpace(rec[2]))
		if err != nil || output < 1 {
			return Trace{}, fmt.Errorf("trace line %d: GeneratedTokens %q: want an integer >= 1", line, rec[2])
		}
		t.Requests = append(t.Requests, Request{Time: at, PromptTokens: prompt, OutputTokens: output})
	}
	if len(t.Requests) == 0 {
		return t, nil
	}
	first, last := t.Requests[0].Time, t.Requests[0].Time
	for _, r := range t.Requests {
		if r.Time.Before(first) {
			first = r.Time
		}
		if r.Time.After(last) {
			last = r.Time
		}
	}
	// Compared before subtracting: Sub saturates beyond 292 years.
	if last.After(first.Add(MaxSpan)) {
		return Trace{}, fmt.Errorf("reading trace: the rows span %s to %s, more than %v: a timestamp is likely wrong",
			first.Format(TimestampLayout), last.Format(TimestampLayout), MaxSpan)
	}
	for i := range t.Requests {
		t.Requests[i].Offset = t.Requests[i].Time.Sub(first)
	}
	return t, nil
}

// ReadFile reads the trace file at path; see [Read].
func ReadFile(path string) (Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return Trace{}, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()
	t, err := Read(f)
	if err != nil {
		return Trace{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}
