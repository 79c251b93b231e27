package emulator

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// poisson returns arrivals at rate per second for d, all of one size, from a
// fixed seed.
func poisson(rate float64, d time.Duration, prompt, output int, seed uint64) []Arrival {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []Arrival
	at := time.Duration(0)
	for i := 0; ; i++ {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= d {
			return out
		}
		out = append(out, Arrival{At: at, Request: Request{ID: strconv.Itoa(i), PromptTokens: prompt, MaxTokens: output}})
	}
}

// sample is the engine's state at one virtual instant.
type sample struct {
	at time.Duration
	Snapshot
}

// run simulates arrivals on an engine of shape cfg, sampling its state every
// 100 ms up to d, and returns the samples and every TTFT by arrival order.
func run(t *testing.T, cfg Config, arrivals []Arrival, d time.Duration) ([]sample, []time.Duration) {
	t.Helper()
	var ttfts []time.Duration
	sim, err := NewSimulator(cfg, t0, func(r *StepResult) {
		for _, tok := range r.Tokens {
			if tok.Index == 0 {
				ttfts = append(ttfts, tok.Latency)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	sim.Schedule(arrivals...)
	var samples []sample
	for at := 100 * time.Millisecond; at <= d; at += 100 * time.Millisecond {
		sim.RunUntil(t0.Add(at))
		samples = append(samples, sample{at: at, Snapshot: sim.Engine().Snapshot()})
	}
	if errs := sim.Rejected(); len(errs) > 0 {
		t.Fatalf("rejected arrivals: %v", errs)
	}
	return samples, ttfts
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// shortConfig is the default engine with vLLM's max_num_seqs default for GPUs
// below 70 GiB, so that short requests hit the batch limit long before the KV
// cache fills.
func shortConfig() Config {
	c := DefaultConfig()
	c.MaxNumSeqs = 256
	return c
}

func TestBelowCapacityQueueStaysEmptyAndTTFTIsPrefillTime(t *testing.T) {
	cfg := shortConfig()
	samples, ttfts := run(t, cfg, poisson(20, 120*time.Second, 200, 100, 1), 120*time.Second)
	maxWaiting, preemptions := 0, uint64(0)
	for _, s := range samples {
		maxWaiting = max(maxWaiting, s.Waiting)
		preemptions = s.Preemptions
	}
	if maxWaiting > 3 || preemptions != 0 {
		t.Errorf("max waiting %d, preemptions %d; want ~0 below capacity", maxWaiting, preemptions)
	}
	// TTFT ≈ the prompt's own prefill step plus, at most, the step in flight.
	alone := cfg.StepTime.Duration(1, 200, 0)
	if m := median(ttfts); m < alone || m > 2*alone {
		t.Errorf("median TTFT %v, want between the lone prefill time %v and twice it", m, alone)
	}
}

func TestPastSaturationQueueGrowsWithoutBound(t *testing.T) {
	cfg := shortConfig()
	samples, ttfts := run(t, cfg, poisson(150, 120*time.Second, 200, 100, 2), 120*time.Second)
	at := func(sec int) sample { return samples[sec*10-1] }
	var prev int
	for _, sec := range []int{30, 60, 90, 120} {
		s := at(sec)
		if s.Waiting <= prev+500 {
			t.Errorf("waiting at %ds = %d, want it to keep growing (previous sample %d)", sec, s.Waiting, prev)
		}
		prev = s.Waiting
		// The batch is full and the KV cache is not the limit.
		if s.Running < cfg.MaxNumSeqs*3/4 || s.KVCacheUsage > 0.5 || s.Preemptions != 0 {
			t.Errorf("at %ds: %+v, want a full batch, KV < 0.5, no preemptions", sec, s.Snapshot)
		}
	}
	early, late := median(ttfts[:len(ttfts)/10]), median(ttfts[len(ttfts)*9/10:])
	if late < 10*time.Second || late < 5*early {
		t.Errorf("median TTFT early %v, late %v; want it to climb past 10 s", early, late)
	}
}

func TestLongPromptsFillKVAndPreemptBeforeQueueGrows(t *testing.T) {
	// 4,000-token prompts with 1,000-token answers at 4/s: each request ends up
	// holding 313 blocks, so the default 27,000-block cache fills at ~86 requests,
	// long before the 256-request batch limit.
	cfg := shortConfig()
	samples, _ := run(t, cfg, poisson(4, 60*time.Second, 4000, 1000, 3), 60*time.Second)
	first := func(cond func(sample) bool) (sample, bool) {
		for _, s := range samples {
			if cond(s) {
				return s, true
			}
		}
		return sample{}, false
	}
	kvHigh, ok1 := first(func(s sample) bool { return s.KVCacheUsage > 0.9 })
	preempt, ok2 := first(func(s sample) bool { return s.Preemptions > 0 })
	queued, ok3 := first(func(s sample) bool { return s.Waiting >= 5 })
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("KV > 0.9 %v, preemption %v, queue >= 5 %v: want all three within a minute", ok1, ok2, ok3)
	}
	t.Logf("KV > 0.9 at %v (waiting %d); first preemption at %v (waiting %d); waiting >= 5 at %v",
		kvHigh.at, kvHigh.Waiting, preempt.at, preempt.Waiting, queued.at)
	if !(kvHigh.at < preempt.at && preempt.at <= queued.at) {
		t.Errorf("want KV > 0.9 first, then a preemption, then the queue; got %v, %v, %v", kvHigh.at, preempt.at, queued.at)
	}
	// A prefill step of a 4,000-token prompt takes ~150 ms, so one or two
	// arrivals may be waiting for the next step; that is not a queue.
	if kvHigh.Waiting >= 5 {
		t.Errorf("waiting = %d when KV passed 0.9, want < 5", kvHigh.Waiting)
	}
}

func TestDrain(t *testing.T) {
	cfg := shortConfig()
	arrivals := poisson(150, 30*time.Second, 200, 100, 4)
	sim, err := NewSimulator(cfg, t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	sim.Schedule(arrivals...)
	sim.RunUntil(t0.Add(30 * time.Second))
	if s := sim.Engine().Snapshot(); s.Waiting < 1000 {
		t.Fatalf("overload left only %d waiting", s.Waiting)
	}
	if !sim.Drain(t0.Add(time.Hour)) {
		t.Fatalf("not drained within an hour: %+v", sim.Engine().Snapshot())
	}
	t.Logf("drained %d requests at %v", len(arrivals), sim.Elapsed())
	s := sim.Engine().Snapshot()
	n := uint64(len(arrivals))
	want := Snapshot{
		UsedBlocks: 1, TotalBlocks: cfg.NumBlocks, KVCacheUsage: 1 / float64(cfg.NumBlocks),
		Counters: Counters{PromptTokens: 200 * n, GenerationTokens: 100 * n, Finished: [3]uint64{0, n, 0}},
	}
	if s != want {
		t.Errorf("after drain: %+v\nwant %+v", s, want)
	}
}
