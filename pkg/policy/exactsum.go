package policy

import "math"

// exactSum is the exact sum of float64 values, read as the float64 nearest to
// it: a function of the values added and removed (a removal adds the
// negation), never of their order. So a pool's sum kept as pods' parts come
// and go (Aggregate) is the very float64 a fold over the same parts in any
// order gives (PoolBuilder), with no drift however long it runs.
//
// Finite values below hugeValue are held as Shewchuk's non-overlapping
// partials (J. R. Shewchuk, "Adaptive Precision Floating-Point Arithmetic and
// Fast Robust Geometric Predicates", 1997), rounded as CPython's math.fsum
// rounds them (Modules/mathmodule.c, math_fsum); infinities, NaN and values at
// or above hugeValue (which could overflow the partials) are counted apart
// and make the sum ±Inf or NaN as float64 addition would. The zero value is
// an empty sum.
type exactSum struct {
	partials       []float64
	posInf, negInf int
	nan            int
}

// hugeValue is the magnitude from which a value counts as infinite: far above
// any saturation or signal (the extractor rejects absurd values), and low
// enough that the partials of 2^20 such values cannot overflow.
const hugeValue = 0x1p1000

// add adds x (sign = 1) or removes it (sign = -1).
func (s *exactSum) add(x float64, sign int) {
	switch {
	case math.IsNaN(x):
		s.nan += sign
		return
	case x >= hugeValue:
		s.posInf += sign
		return
	case x <= -hugeValue:
		s.negInf += sign
		return
	}
	if sign < 0 {
		x = -x
	}
	i := 0
	for _, y := range s.partials {
		if math.Abs(x) < math.Abs(y) {
			x, y = y, x
		}
		hi := x + y
		lo := y - (hi - x)
		if lo != 0 {
			s.partials[i] = lo
			i++
		}
		x = hi
	}
	s.partials = append(s.partials[:i], x)
}

// Add adds x.
func (s *exactSum) Add(x float64) { s.add(x, 1) }

// Remove removes x, which must have been added.
func (s *exactSum) Remove(x float64) { s.add(x, -1) }

// Value returns the float64 nearest to the exact sum (ties to even), ±Inf
// when a value at or above hugeValue (or an infinity) is in it, NaN when NaN
// is, or both infinities are; 0 for an empty sum.
func (s *exactSum) Value() float64 {
	switch {
	case s.nan > 0 || (s.posInf > 0 && s.negInf > 0):
		return math.NaN()
	case s.posInf > 0:
		return math.Inf(1)
	case s.negInf > 0:
		return math.Inf(-1)
	}
	p := s.partials
	n := len(p)
	if n == 0 {
		return 0
	}
	// CPython's math_fsum: sum the partials from the top, stopping at the
	// first inexact addition, then correct a half-way case.
	n--
	hi := p[n]
	lo := 0.0
	for n > 0 {
		x := hi
		n--
		y := p[n]
		hi = x + y
		yr := hi - x
		lo = y - yr
		if lo != 0 {
			break
		}
	}
	if n > 0 && ((lo < 0 && p[n-1] < 0) || (lo > 0 && p[n-1] > 0)) {
		y := lo * 2
		x := hi + y
		if yr := x - hi; y == yr {
			hi = x
		}
	}
	return hi
}

// Clone returns an independent copy.
func (s *exactSum) Clone() exactSum {
	c := *s
	c.partials = append([]float64(nil), s.partials...)
	return c
}
