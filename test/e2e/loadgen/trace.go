package loadgen

import (
	"math/rand/v2"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// Request is one request to send: when (offset from the start of the run) and its size in
// tokens.
type Request struct {
	At           time.Duration
	PromptTokens int
	OutputTokens int
}

// FromTrace turns a request-arrival trace (read by the adapter's own
// lab/trace reader, which validates every row) into requests whose At is the
// offset from the trace's first arrival.
func FromTrace(t trace.Trace) []Request {
	out := make([]Request, len(t.Requests))
	for i, r := range t.Requests {
		out[i] = Request{At: r.Offset, PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens}
	}
	return out
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

// Poisson returns requests arriving as a Poisson process at rps for length (exponential
// gaps from a generator seeded with seed, so a run is repeatable), each with the given
// sizes, starting at offset start. Real traffic is bursty: evenly spaced arrivals below
// capacity never queue, Poisson ones do.
func Poisson(start time.Duration, rps float64, length time.Duration, prompt, output int, seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []Request
	for at := start; ; {
		at += time.Duration(rng.ExpFloat64() / rps * float64(time.Second))
		if at >= start+length {
			return out
		}
		out = append(out, Request{At: at, PromptTokens: prompt, OutputTokens: output})
	}
}
