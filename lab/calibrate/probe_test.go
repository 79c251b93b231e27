package calibrate

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
)

// FuzzProbeWindow: whatever a hostile engine streams (chunk times, the token
// counts its usage chunk claims, prompts), a probe group either is refused or
// measures a finite, non-negative step time and context.
func FuzzProbeWindow(f *testing.F) {
	seed := func(recs ...[3]int64) []byte {
		var b []byte
		for _, r := range recs {
			b = binary.LittleEndian.AppendUint64(b, uint64(r[0]))
			b = binary.LittleEndian.AppendUint64(b, uint64(r[1]))
			b = binary.LittleEndian.AppendUint64(b, uint64(r[2]))
		}
		return b
	}
	f.Add(seed([3]int64{128, 128, 10_000_000}, [3]int64{128, 128, 10_000_000}))
	f.Add(seed([3]int64{8000, 1 << 40, 1}, [3]int64{-5, 0, -1}))
	f.Add(seed([3]int64{math.MaxInt64, math.MaxInt64, math.MaxInt64}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs []*record
		for len(data) >= 24 && len(recs) < 16 {
			prompt := int(int32(binary.LittleEndian.Uint64(data)))
			tokens := int(int32(binary.LittleEndian.Uint64(data[8:])))
			gap := time.Duration(binary.LittleEndian.Uint64(data[16:]) % uint64(time.Second))
			data = data[24:]
			rec := &record{step: stepProbe, prompt: prompt, tokens: tokens}
			n := min(max(tokens, 0), 300)
			at := time.Duration(len(recs)) * time.Millisecond
			for range n {
				rec.times = append(rec.times, at)
				at += gap // the client's clock never goes back
			}
			recs = append(recs, rec)
		}
		g, ok := probeWindow(recs)
		if !ok {
			return
		}
		if math.IsNaN(g.StepSeconds) || math.IsInf(g.StepSeconds, 0) || g.StepSeconds < 0 || math.IsNaN(g.ContextTokens) || math.IsInf(g.ContextTokens, 0) {
			t.Fatalf("probe group %+v from %d requests", g, len(recs))
		}
	})
}

// TestReadStreamRefusesNegativeUsage: a usage chunk claiming fewer than 0
// tokens fails the request, naming the counts, instead of entering the fit;
// a well-formed stream keeps the probe's chunk times.
func TestReadStreamRefusesNegativeUsage(t *testing.T) {
	r := &runner{clk: clock.RealClock{}, t0: time.Now()}
	chunk := `data: {"choices":[{"text":"a"}]}` + "\n\n"
	for _, c := range []struct {
		usage, err string
	}{
		{`{"prompt_tokens":-5,"completion_tokens":2}`, "-5 prompt and 2 completion tokens: a count below 0"},
		{`{"prompt_tokens":5,"completion_tokens":-2}`, "5 prompt and -2 completion tokens"},
		{`{"prompt_tokens":5,"completion_tokens":2}`, ""},
	} {
		body := chunk + chunk + `data: {"choices":[],"usage":` + c.usage + "}\n\ndata: [DONE]\n\n"
		loc := &record{step: stepProbe, first: -1, last: -1}
		chunks, tokens, err := r.readStream(strings.NewReader(body), loc, func() {})
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("usage %s: error %v, want one saying %q", c.usage, err, c.err)
		case c.err == "" && (err != nil || chunks != 2 || tokens != 2 || loc.prompt != 5 || len(loc.times) != 2):
			t.Errorf("usage %s: %d chunks, %d tokens, prompt %d, %d times, %v; want 2, 2, 5, 2 and no error", c.usage, chunks, tokens, loc.prompt, len(loc.times), err)
		}
	}
}

// TestProbeOverstatedKeepsItsCost: when the probe's long groups ran slow (a
// busy host) and net of its context cost the steps' line would need a
// negative perSeq, the probe's cost stands, base and perSeq are fitted at
// least 0, and the report says so.
func TestProbeOverstatedKeepsItsCost(t *testing.T) {
	cfg := DefaultConfig()
	cfg.URL, cfg.Warmup, cfg.StepDuration, cfg.MetricsInterval = "http://127.0.0.1:8000", 20, 30*time.Second, 250*time.Millisecond
	cfg.Rates = []float64{4, 6, 8, 10, 12, 14, 16, 18, 20}
	r, windows, warmupEnd := traceRun(t, cfg, emulator.DefaultConfig())
	for _, rec := range r.records {
		if rec.step == stepProbe && rec.shape.PromptTokens > probePromptShort {
			for i := range rec.times { // every decode step 5 ms slower
				rec.times[i] += time.Duration(i) * 5 * time.Millisecond
			}
		}
	}
	rep := r.analyse(windows, warmupEnd)
	st, cp := rep.Profile.StepTime, rep.Fit.ContextProbe
	if cp == nil || cp.PerContextTokenSeconds == nil {
		t.Fatalf("probe %+v: want it measured", cp)
	}
	if got, want := st.PerContextToken.Seconds(), *cp.PerContextTokenSeconds; want < 100e-9 || math.Abs(got-want) > 1e-9 {
		t.Errorf("perContextToken %v, probe %.3gs: want the probe's (overstated) cost kept", st.PerContextToken, want)
	}
	if st.Base.Duration < 0 || st.PerSeq.Duration < 0 || !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "net of the context probe's cost") }) {
		t.Errorf("base %v, perSeq %v, notes %q: want both at least 0 and a note naming the probe's cost", st.Base, st.PerSeq, rep.Notes)
	}
}
