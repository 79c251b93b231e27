package simulate

import (
	"strconv"
	"testing"
)

// BenchmarkRunAzureConversation replays the whole one-hour Azure conversation
// trace (19,366 requests; CC-BY 4.0, Splitwise, ISCA 2024) under the oracle, the
// static fleet and every built-in policy, with the default engine and a 120 s
// cold start: as recorded (x1) and at 8 times its rate (x8, 154,928 requests,
// peaking at 6 replicas: the README's comparison). Target (issue 11): under a
// minute of CPU on one core per run; run with -cpu 1.
func BenchmarkRunAzureConversation(b *testing.B) {
	for _, rate := range []float64{1, 8} {
		b.Run("x"+strconv.FormatFloat(rate, 'f', -1, 64), func(b *testing.B) {
			o := DefaultWorkloadOptions()
			o.RateScale = rate
			w := azureWindow(b, o)
			ps, err := BuiltinAutoscalers(DefaultTargets(), 1)
			if err != nil {
				b.Fatal(err)
			}
			cfg := DefaultConfig()
			b.ResetTimer()
			for b.Loop() {
				rep, err := Run(cfg, w, ps)
				if err != nil {
					b.Fatal(err)
				}
				scrapes := 0
				for _, p := range rep.Autoscalers {
					scrapes += p.Scrapes
				}
				b.ReportMetric(float64(len(w.Requests)), "requests/op")
				b.ReportMetric(float64(len(rep.Autoscalers)), "policies/op")
				b.ReportMetric(float64(scrapes), "scrapes/op")
				b.ReportMetric(float64(result(b, rep, "oracle").PeakReplicas), "oracle-peak-replicas")
			}
		})
	}
}
