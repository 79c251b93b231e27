package emulator

import (
	"strconv"
	"testing"
	"time"

	"github.com/saturation-adapter/saturation-adapter/lab/trace"
)

// azureConversation loads the one-hour Azure conversation trace (CC-BY 4.0,
// Splitwise, ISCA 2024; see data/azure-llm-trace-2023/README.md) as arrivals.
func azureConversation(tb testing.TB) []Arrival {
	tb.Helper()
	tr, err := trace.ReadFile("../../data/azure-llm-trace-2023/AzureLLMInferenceTrace_conv.csv")
	if err != nil {
		tb.Fatal(err)
	}
	arrivals := make([]Arrival, len(tr.Requests))
	for i, r := range tr.Requests {
		arrivals[i] = Arrival{At: r.Offset, Request: Request{ID: strconv.Itoa(i), PromptTokens: r.PromptTokens, MaxTokens: r.OutputTokens}}
	}
	return arrivals
}

// BenchmarkReplayAzureConversation replays the one-hour Azure conversation trace
// (19,366 requests) on one default engine on the virtual clock. The target is
// well under 5 s of CPU per replay. Reported: virtual seconds simulated, steps,
// preemptions and the largest queue seen at a step boundary.
func BenchmarkReplayAzureConversation(b *testing.B) {
	arrivals := azureConversation(b)
	b.ResetTimer()
	for b.Loop() {
		var steps, maxWaiting int
		var sim *Simulator
		sim, err := NewSimulator(DefaultConfig(), t0, func(r *StepResult) {
			steps++
			maxWaiting = max(maxWaiting, sim.Engine().waiting.len())
		})
		if err != nil {
			b.Fatal(err)
		}
		sim.Schedule(arrivals...)
		if !sim.Drain(t0.Add(2 * time.Hour)) {
			b.Fatal("trace did not drain within two hours")
		}
		s := sim.Engine().Snapshot()
		if got := s.Finished[1]; got != uint64(len(arrivals)) {
			b.Fatalf("finished %d of %d", got, len(arrivals))
		}
		b.ReportMetric(sim.Elapsed().Seconds(), "virtual-s/op")
		b.ReportMetric(float64(steps), "steps/op")
		b.ReportMetric(float64(s.Preemptions), "preemptions/op")
		b.ReportMetric(float64(maxWaiting), "max-waiting/op")
	}
}

// BenchmarkReplayAzureConversationWithMetrics is the replay with the Prometheus
// histograms fed at every step, as the server does.
func BenchmarkReplayAzureConversationWithMetrics(b *testing.B) {
	arrivals := azureConversation(b)
	b.ResetTimer()
	for b.Loop() {
		var sim *Simulator
		var m *Metrics
		sim, err := NewSimulator(DefaultConfig(), t0, func(r *StepResult) { m.Observe(0, r) })
		if err != nil {
			b.Fatal(err)
		}
		m, err = NewMetrics(MetricsOptions{ModelName: "m", MaxModelLen: DefaultConfig().MaxModelLen},
			func(int) Snapshot { return sim.Engine().Snapshot() })
		if err != nil {
			b.Fatal(err)
		}
		sim.Schedule(arrivals...)
		if !sim.Drain(t0.Add(2 * time.Hour)) {
			b.Fatal("trace did not drain within two hours")
		}
	}
}

// TestReplayAzureConversationFirstMinutes replays the trace's first ten minutes
// as a unit test: it must run, reject nothing and drain.
func TestReplayAzureConversationFirstMinutes(t *testing.T) {
	arrivals := azureConversation(t)
	var head []Arrival
	for _, a := range arrivals {
		if a.At < 10*time.Minute {
			head = append(head, a)
		}
	}
	sim, err := NewSimulator(DefaultConfig(), t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	sim.Schedule(head...)
	if !sim.Drain(t0.Add(time.Hour)) {
		t.Fatalf("not drained: %+v", sim.Engine().Snapshot())
	}
	if errs := sim.Rejected(); len(errs) > 0 {
		t.Fatalf("rejected: %v", errs[0])
	}
	if got := sim.Engine().Snapshot().Finished[1]; got != uint64(len(head)) {
		t.Errorf("finished %d of %d", got, len(head))
	}
}

// BenchmarkReplayAzureConversationCompressed replays the same trace with its
// arrivals compressed in time by 2, 3 and 4 (≈ 11, 16 and 22 requests/s of
// ~1,155-token prompts and ~211-token answers), around one default engine's
// capacity: the regime where queue, KV cache and preemptions move.
func BenchmarkReplayAzureConversationCompressed(b *testing.B) {
	trace := azureConversation(b)
	for _, factor := range []int{2, 3, 4} {
		b.Run("x"+strconv.Itoa(factor), func(b *testing.B) {
			arrivals := make([]Arrival, len(trace))
			for i, a := range trace {
				arrivals[i] = Arrival{At: a.At / time.Duration(factor), Request: a.Request}
			}
			for b.Loop() {
				var maxWaiting int
				var maxKV float64
				var sim *Simulator
				sim, err := NewSimulator(DefaultConfig(), t0, func(*StepResult) {
					s := sim.Engine().Snapshot()
					maxWaiting, maxKV = max(maxWaiting, s.Waiting), max(maxKV, s.KVCacheUsage)
				})
				if err != nil {
					b.Fatal(err)
				}
				sim.Schedule(arrivals...)
				if !sim.Drain(t0.Add(4 * time.Hour)) {
					b.Fatal("trace did not drain")
				}
				b.ReportMetric(sim.Elapsed().Seconds(), "virtual-s/op")
				b.ReportMetric(float64(sim.Engine().Snapshot().Preemptions), "preemptions/op")
				b.ReportMetric(float64(maxWaiting), "max-waiting/op")
				b.ReportMetric(maxKV, "max-kv/op")
			}
		})
	}
}
