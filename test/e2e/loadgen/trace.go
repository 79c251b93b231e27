package loadgen

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Request is one request to send: when (offset from the start of the run) and its size in
// tokens.
type Request struct {
	At           time.Duration
	PromptTokens int
	OutputTokens int
}

// ReadAzureTrace reads an Azure LLM inference trace CSV (Splitwise, ISCA 2024, CC-BY 4.0:
// columns TIMESTAMP, ContextTokens, GeneratedTokens; timestamps like
// "2023-11-16 18:15:46.6805900") into requests whose At is the offset from the first row.
func ReadAzureTrace(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = 3
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if header[0] != "TIMESTAMP" || header[1] != "ContextTokens" || header[2] != "GeneratedTokens" {
		return nil, fmt.Errorf("reading %s: unexpected header %v", path, header)
	}
	var out []Request
	var first time.Time
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		ts, err := time.Parse("2006-01-02 15:04:05.9999999", rec[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: timestamp: %w", path, line, err)
		}
		in, err1 := strconv.Atoi(rec[1])
		outTok, err2 := strconv.Atoi(rec[2])
		if err1 != nil || err2 != nil || in < 0 || outTok < 0 {
			return nil, fmt.Errorf("%s:%d: bad token counts %q, %q", path, line, rec[1], rec[2])
		}
		if first.IsZero() {
			first = ts
		}
		out = append(out, Request{At: ts.Sub(first), PromptTokens: in, OutputTokens: outTok})
	}
	return out, nil
}

// Window returns the requests with from <= At < from+length, shifted to start at 0.
func Window(reqs []Request, from, length time.Duration) []Request {
	var out []Request
	for _, r := range reqs {
		if r.At >= from && r.At < from+length {
			r.At -= from
			out = append(out, r)
		}
	}
	return out
}

// Compress divides every arrival offset by speedup (time compression), keeping sizes.
func Compress(reqs []Request, speedup float64) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.At = time.Duration(float64(r.At) / speedup)
		out[i] = r
	}
	return out
}

// Step returns evenly spaced requests at rps for length, each with the given sizes,
// starting at offset start.
func Step(start time.Duration, rps float64, length time.Duration, prompt, output int) []Request {
	n := int(rps * length.Seconds())
	out := make([]Request, n)
	for i := range out {
		out[i] = Request{At: start + time.Duration(float64(i)/rps*float64(time.Second)), PromptTokens: prompt, OutputTokens: output}
	}
	return out
}
