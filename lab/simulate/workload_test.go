package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

func TestNewWorkload(t *testing.T) {
	rows := func(offsets ...float64) trace.Trace {
		var tr trace.Trace
		for i, o := range offsets {
			tr.Requests = append(tr.Requests, trace.Request{Offset: sec(o), PromptTokens: 100 + i, OutputTokens: 10 + i})
		}
		return tr
	}
	at := func(w Workload) []time.Duration {
		var out []time.Duration
		for _, r := range w.Requests {
			out = append(out, r.At)
		}
		return out
	}
	tests := []struct {
		name    string
		tr      trace.Trace
		opts    func(*WorkloadOptions)
		want    []time.Duration
		dur     time.Duration
		from    time.Duration
		wantErr string
	}{
		{name: "as recorded, unsorted rows sorted", tr: rows(0, 3, 1), opts: func(*WorkloadOptions) {}, want: []time.Duration{0, sec(1), sec(3)}, dur: sec(3)},
		{name: "window", tr: rows(0, 1, 2, 3, 4), opts: func(o *WorkloadOptions) { o.Start, o.Length = sec(1), sec(2) }, want: []time.Duration{0, sec(1)}, dur: sec(2)},
		{name: "time scale", tr: rows(0, 1, 2), opts: func(o *WorkloadOptions) { o.TimeScale = 0.5 }, want: []time.Duration{0, sec(0.5), sec(1)}, dur: sec(1)},
		{name: "rate scale 2 without jitter", tr: rows(0, 1), opts: func(o *WorkloadOptions) { o.RateScale, o.CopyJitter = 2, 0 }, want: []time.Duration{0, 0, sec(1), sec(1)}, dur: sec(1)},
		{name: "warm-up replays what precedes the window, unscored", tr: rows(0, 1, 2, 3, 4), opts: func(o *WorkloadOptions) { o.Start, o.Length, o.WarmUp = sec(2), sec(2), sec(1) },
			want: []time.Duration{0, sec(1), sec(2)}, dur: sec(3), from: sec(1)},
		{name: "warm-up at most what precedes the window", tr: rows(0, 1, 2, 3, 4), opts: func(o *WorkloadOptions) { o.Start, o.Length, o.WarmUp = sec(1), sec(2), sec(10) },
			want: []time.Duration{0, sec(1), sec(2)}, dur: sec(3), from: sec(1)},
		{name: "warm-up time-scaled", tr: rows(0, 1, 2, 3), opts: func(o *WorkloadOptions) { o.Start, o.WarmUp, o.TimeScale = sec(2), sec(2), 0.5 },
			want: []time.Duration{0, sec(0.5), sec(1), sec(1.5)}, dur: sec(1.5), from: sec(1)},
		{name: "warm-up of a window without requests", tr: rows(0, 1), opts: func(o *WorkloadOptions) { o.Start, o.WarmUp = sec(5), sec(5) }, wantErr: "no request in the trace window"},
		{name: "negative warm-up", tr: rows(0), opts: func(o *WorkloadOptions) { o.WarmUp = -sec(1) }, wantErr: "warm-up must be >= 0"},
		{name: "empty window", tr: rows(0, 1), opts: func(o *WorkloadOptions) { o.Start = sec(5) }, wantErr: "no request in the trace window"},
		{name: "bad options", tr: rows(0), opts: func(o *WorkloadOptions) { o.TimeScale, o.RateScale, o.Start = 0, -1, -sec(1) }, wantErr: "time scale must be"},
		// No replay of zero length (a 0/0 cost), none beyond trace.MaxSpan (a
		// run of hours), and no overflowing scaled time.
		{name: "one row", tr: rows(0), opts: func(*WorkloadOptions) {}, wantErr: "under 1s"},
		{name: "equal timestamps", tr: rows(0, 0, 0), opts: func(*WorkloadOptions) {}, wantErr: "under 1s"},
		{name: "one row with a length", tr: rows(5), opts: func(o *WorkloadOptions) { o.Length = time.Minute }, want: []time.Duration{sec(5)}, dur: time.Minute},
		{name: "vanishing time scale", tr: rows(0, 60), opts: func(o *WorkloadOptions) { o.TimeScale = 1e-300 }, wantErr: "under 1s"},
		{name: "huge time scale", tr: rows(0, 60), opts: func(o *WorkloadOptions) { o.TimeScale = 1e6 }, wantErr: "more than 744h0m0s"},
		{name: "overflowing time scale", tr: rows(0, 60), opts: func(o *WorkloadOptions) { o.TimeScale = 1e12 }, wantErr: "more than 744h0m0s"},
		{name: "huge length", tr: rows(0, 60), opts: func(o *WorkloadOptions) { o.Length = 1000 * time.Hour }, wantErr: "shorten --length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultWorkloadOptions()
			tt.opts(&o)
			w, err := NewWorkload(tt.tr, o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, at(w)); diff != "" || w.Duration != tt.dur || w.ScoreFrom != tt.from {
				t.Errorf("arrivals (-want +got):\n%s\nduration %v, want %v; scored from %v, want %v", diff, w.Duration, tt.dur, w.ScoreFrom, tt.from)
			}
		})
	}
}

// TestRateScaleKeepsTheShape: on the Azure trace, --rate-scale 2.5 gives 2.5 ×
// the requests within 1 %, each minute scaled alike, and the same seed gives the
// same copies.
func TestRateScaleKeepsTheShape(t *testing.T) {
	tr, err := trace.ReadFile(azureConv)
	if err != nil {
		t.Fatal(err)
	}
	base, err := NewWorkload(tr, DefaultWorkloadOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultWorkloadOptions()
	o.RateScale, o.Seed = 2.5, 3
	a, _ := NewWorkload(tr, o)
	b, _ := NewWorkload(tr, o)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different workloads:\n%s", diff)
	}
	ratio := float64(len(a.Requests)) / float64(len(base.Requests))
	if ratio < 2.475 || ratio > 2.525 {
		t.Errorf("%d requests from %d: ratio %.3f, want 2.5 ± 1 %%", len(a.Requests), len(base.Requests), ratio)
	}
	perMinute := func(w Workload) map[int]int {
		m := map[int]int{}
		for _, r := range w.Requests {
			m[int(r.At/time.Minute)]++
		}
		return m
	}
	pa, pb := perMinute(a), perMinute(base)
	for minute, n := range pb {
		if r := float64(pa[minute]) / float64(n); n > 100 && (r < 2.2 || r > 2.8) {
			t.Errorf("minute %d: %d requests from %d, ratio %.2f", minute, pa[minute], n, r)
		}
	}
}

func TestProfile(t *testing.T) {
	c, err := ParseProfile([]byte("name: small GPU\nmaxNumSeqs: 64\nstepTime: {base: 12ms, perPrefillToken: 80us}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := emulator.DefaultConfig()
	want.MaxNumSeqs, want.StepTime.Base, want.StepTime.PerPrefillToken = 64, 12*time.Millisecond, 80*time.Microsecond
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("profile over the defaults (-want +got):\n%s", diff)
	}
	out, err := MarshalProfile(ProfileOf(c))
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseProfile(out)
	if err != nil || !cmp.Equal(back, c) {
		t.Errorf("round trip through\n%s\n= %+v, %v; want %+v", out, back, err, c)
	}
	for in, wantErr := range map[string]string{
		"maxNumSeq: 64\n":                       `unknown field "maxNumSeq"`,
		"numGPUBlocks: 10\n":                    "larger than the KV cache holds",
		"stepTime: {base: fast}\n":              "decoding engine profile",
		"maxNumSeqs: 0\nmaxNumBatchedTokens: 0": "max-num-seqs must be in [1, 1048576], got 0",
		"numGPUBlocks: 9223372036854775807\n":   "num-gpu-blocks must be at most 67108864, got 9223372036854775807",
	} {
		if _, err := ParseProfile([]byte(in)); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseProfile(%q) error = %v, want %q", in, err, wantErr)
		}
	}
	if _, err := LoadProfile("testdata/does-not-exist.yaml"); err == nil {
		t.Error("LoadProfile of a missing file succeeded")
	}
}

// FuzzParseProfile: any input is an error or a configuration the emulator accepts.
func FuzzParseProfile(f *testing.F) {
	f.Add([]byte("maxNumSeqs: 64\nstepTime: {base: 12ms}\n"))
	f.Add([]byte(`{"numGPUBlocks": 2, "maxModelLen": 16}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseProfile(data)
		if err != nil {
			return
		}
		if _, err := emulator.NewEngine(c); err != nil {
			t.Fatalf("ParseProfile accepted %+v, which the emulator rejects: %v", c, err)
		}
	})
}
