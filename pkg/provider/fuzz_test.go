package provider

import (
	"math"
	"testing"
)

// FuzzMilliQuantity: a value is served rounded to milli units, never negative,
// never NaN, never cast past int64; what cannot be served is an error.
func FuzzMilliQuantity(f *testing.F) {
	for _, v := range []float64{0, 0.0004, 0.0006, 0.734, 10.334, 329.5, -0.3875, 9.3e15, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, 9.223372036854775e15} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		q, err := MilliQuantity(v)
		if err != nil {
			if !(math.IsNaN(v) || math.IsInf(v, 0) || v > 9e15) {
				t.Fatalf("MilliQuantity(%g) = %v, want a value", v, err)
			}
			return
		}
		m := q.MilliValue()
		if m < 0 {
			t.Fatalf("MilliQuantity(%g) = %s, negative", v, q.String())
		}
		if want := math.Max(v, 0) * 1000; math.Abs(float64(m)-want) > 0.5+want*1e-12 {
			t.Fatalf("MilliQuantity(%g) = %dm, want %g rounded", v, m, want)
		}
	})
}
