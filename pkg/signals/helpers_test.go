package signals

import (
	"math"
	"strconv"
)

// deref renders a value that may be absent, for messages.
func deref(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// approx compares two values to 1e-9.
func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// ftoa formats a float as the exposition format writes it.
func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
