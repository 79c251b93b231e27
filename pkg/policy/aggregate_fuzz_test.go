package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/saturation-adapter/saturation-adapter/internal/testfixture"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// aggCatalog is the built-in policies (a 30 s hold) beside one with every term
// kind (two latency windows), and a signal that holds for 10 s.
func aggCatalog(t testing.TB) *Catalog {
	c, err := NewCatalog(append(BuiltinPolicies(DefaultSetPoints(), 1, 30*time.Second),
		Policy{Name: "all", Kind: KindDemand, UnknownSaturation: 1, QueueCap: 100, HoldLastGood: 20 * time.Second, Terms: []Term{
			{Kind: TermQueueDepth, SetPoint: 0.3, MaxRatio: 1e6}, {Kind: TermKVCacheUsage, SetPoint: 0.7},
			{Kind: TermBatchSlots, SetPoint: 0.5, MaxNumSeqs: 4}, {Kind: TermPreemptionRate, SetPoint: 0.1},
			{Kind: TermTTFT, SetPoint: 0.2, Quantile: 0.9, Window: time.Minute}, {Kind: TermE2ELatency, SetPoint: 1, Quantile: 0.5, Window: 2 * time.Minute},
			{Kind: TermInterTokenLatency, SetPoint: 0.05, Quantile: 0.99, Window: time.Minute},
		}},
		Policy{Name: "running-held", Kind: KindSignal, Signal: signals.Running, HoldLastGood: 10 * time.Second})...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// aggBodies returns the fixtures' bodies (real dumps and hazards: NaN, absent
// families, custom buckets, several engines), sorted by name, extracted with
// histograms; the ones that do not extract are left out.
func aggBodies(t testing.TB) []signals.Reading {
	bodies := testfixture.Bodies(t)
	names := make([]string, 0, len(bodies))
	for n := range bodies {
		names = append(names, n)
	}
	slices.Sort(names)
	e := signals.NewExtractorWith(signals.ExtractOptions{Histograms: true})
	var out []signals.Reading
	for _, n := range names {
		r, err := e.Extract(bodies[n])
		if err == nil {
			out = append(out, r)
		}
	}
	return out
}

// FuzzAggregate: an Aggregate kept through any sequence of events gives,
// after each, exactly the Pool a PoolOnly PoolBuilder folds from the same
// pods' histories at the same time (or says it cannot: mixed histogram
// layouts, counts that are not whole). The events: readings of several pods
// (real and faulty bodies: NaN, absent values, several engines, custom
// buckets; one or two readings, up to minutes old, or none), pods leaving
// their pool (a membership change), time moving past the max age and the
// holds. Three pools under different policies share pod keys: what one
// learns must not reach another.
func FuzzAggregate(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{0, 0, 0, 4, 1, 3, 8, 2, 7, 12, 200, 13, 33, 9, 17, 2, 2, 250})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog"))
	c := aggCatalog(f)
	readings := aggBodies(f)
	opts := history.HistoryOptions{Needs: c.Needs()}
	policies := c.Policies()
	f.Fuzz(func(t *testing.T, prog []byte) {
		now := t0
		type pod struct {
			h   *history.History
			why string
		}
		type pool struct {
			policy *Policy
			agg    *Aggregate[int]
			pods   map[int]pod
		}
		var pools []*pool
		for i := range 3 {
			p := &policies[(int(prog0(prog))+i*5)%len(policies)]
			pools = append(pools, &pool{policy: p, agg: NewAggregate[int](p, now, maxAge), pods: map[int]pod{}})
		}
		next := func() byte {
			if len(prog) == 0 {
				return 0
			}
			b := prog[0]
			prog = prog[1:]
			return b
		}
		// history builds a pod's history from two bytes: which bodies, how
		// old its newest reading is, and whether it has one or two.
		history_ := func(a, b byte) *history.History {
			if a == 255 {
				return nil
			}
			ages := []time.Duration{0, time.Second, 5 * time.Second, 7 * time.Second, 15 * time.Second, 25 * time.Second, 45 * time.Second, 3 * time.Minute}
			r1 := readings[int(a)%len(readings)]
			r1.Time = now.Add(-ages[int(b)%len(ages)])
			if b&0x80 == 0 {
				return history.NewHistory(opts, &r1)
			}
			r0 := readings[int(a/3+b)%len(readings)]
			r0.Time = r1.Time.Add(-15 * time.Second)
			return history.NewHistory(opts, &r0, &r1)
		}
		for step := 0; len(prog) > 0 && step < 64; step++ {
			op := next()
			pl := pools[int(op>>2)%len(pools)]
			k := int(op>>4) % 6
			switch op % 4 {
			case 0, 1:
				h := history_(next(), next())
				why := ""
				if op%4 == 1 {
					why = "scrape failing: timeout"
				}
				for _, p := range pools {
					p.agg.Advance(now)
				}
				pl.agg.Set(k, h, why)
				pl.pods[k] = pod{h: h, why: why}
			case 2:
				pl.agg.Remove(k)
				delete(pl.pods, k)
			case 3:
				steps := []time.Duration{time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 6 * time.Second, 11 * time.Second, 21 * time.Second, time.Minute}
				now = now.Add(steps[int(next())%len(steps)])
				for _, p := range pools {
					p.agg.Advance(now)
				}
			}
			for i, p := range pools {
				got, ok := p.agg.Pool(int(op % 3))
				if p.agg.Len() != len(p.pods) {
					t.Fatalf("step %d pool %d: %d pods, want %d", step, i, p.agg.Len(), len(p.pods))
				}
				if !ok {
					continue
				}
				b := p.policy.NewPool(now, maxAge)
				b.PoolOnly()
				keys := make([]int, 0, len(p.pods))
				for k := range p.pods {
					keys = append(keys, k)
				}
				// Any order: the fold's sum is exact.
				slices.SortFunc(keys, func(x, y int) int { return (y*7)%6 - (x*7)%6 })
				for _, k := range keys {
					b.Add(p.pods[k].h, p.pods[k].why)
				}
				b.AddStarting(int(op % 3))
				want := b.Pool()
				if diff := cmp.Diff(describePool(want), describePool(got)); diff != "" {
					t.Fatalf("step %d, pool %d (%s, %d pods, now %s): aggregate differs from the fold (-fold +aggregate):\n%s",
						step, i, p.policy.Name, len(p.pods), now.Sub(t0), diff)
				}
			}
		}
	})
}

func prog0(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// describePool renders a Pool for comparison: floats by their bits (NaN
// included), times exactly.
func describePool(p Pool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pods %d fresh %d known %d held %d states %v starting %d %q oldest %s\n", p.Pods, p.Fresh, p.Known, p.Held, p.States,
		p.Starting, p.InFlight, p.Oldest.Format(time.RFC3339Nano))
	if p.Value != nil {
		fmt.Fprintf(&b, "value %g (%x)\n", *p.Value, math.Float64bits(*p.Value))
	} else {
		b.WriteString("value none\n")
	}
	if p.Measured != nil {
		fmt.Fprintf(&b, "measured %g (%x)\n", *p.Measured, math.Float64bits(*p.Measured))
	}
	for _, l := range p.Latency {
		fmt.Fprintf(&b, "latency %s %x %x %x %v %q\n", l.Term, math.Float64bits(l.Value), math.Float64bits(l.SetPoint), math.Float64bits(l.Ratio), l.Capped, l.Note)
	}
	return b.String()
}
