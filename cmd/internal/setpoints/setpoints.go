// Package setpoints holds the set-point flags that the adapter (its server and
// explain) and the lab tool (simulate, calibrate's recommendation) share, so that
// one flag name means one thing in every command and both bind the one set-point
// type, policy.SetPoints.
package setpoints

import (
	"fmt"
	"math"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/spf13/pflag"
)

// Flags are the set points of the built-in saturation policies and the
// saturation counted for a pod without fresh data.
type Flags struct {
	// SetPoints are --queue-depth-set-point (requests) and
	// --kv-cache-usage-set-point (ratio).
	SetPoints policy.SetPoints
	// UnknownSaturation is --unknown-pod-saturation (saturation, >= 0).
	UnknownSaturation float64
}

// New returns policy.DefaultSetPoints and policy.DefaultUnknownSaturation.
func New() Flags {
	return Flags{SetPoints: policy.DefaultSetPoints(), UnknownSaturation: policy.DefaultUnknownSaturation}
}

// AddFlags adds --queue-depth-set-point, --kv-cache-usage-set-point and
// --unknown-pod-saturation to fs. The names before the set-point rename
// (--queue-depth-target, --kv-cache-usage-target) stay as hidden, deprecated
// aliases that print a warning when used.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&f.SetPoints.QueueDepth, "queue-depth-set-point", f.SetPoints.QueueDepth,
		"Waiting requests per pod (at least 0.001) at which a pod counts as saturated (saturation 1.0). Default from the Gateway API inference extension's saturation detector.")
	fs.Float64Var(&f.SetPoints.KVCacheUsage, "kv-cache-usage-set-point", f.SetPoints.KVCacheUsage,
		"KV-cache usage ratio, in [0.001, 1], at which a pod counts as saturated (saturation 1.0).")
	fs.Float64Var(&f.UnknownSaturation, "unknown-pod-saturation", f.UnknownSaturation,
		"Saturation counted for a Ready pod without fresh data (scrape failing, stale, nothing valid) or whose engine cannot serve (wedged, frozen, sleeping), in [0, 1000]. 1.0 treats it as at its set point.")
	for _, alias := range [][2]string{{"queue-depth-target", "queue-depth-set-point"}, {"kv-cache-usage-target", "kv-cache-usage-set-point"}} {
		old, now := alias[0], alias[1]
		fl := *fs.Lookup(now)
		fl.Name, fl.Shorthand = old, ""
		fl.Deprecated = "use --" + now
		fl.Hidden = true
		fs.AddFlag(&fl)
	}
}

// Validate returns one error per bad flag, naming the flag and its value.
func (f *Flags) Validate() []error {
	var errs []error
	if q := f.SetPoints.QueueDepth; !(q >= policy.MinSetPoint) || math.IsInf(q, 0) {
		errs = append(errs, fmt.Errorf("--queue-depth-set-point=%g: must be a finite number >= %g", q, policy.MinSetPoint))
	}
	if kv := f.SetPoints.KVCacheUsage; !(kv >= policy.MinSetPoint) || kv > 1 {
		errs = append(errs, fmt.Errorf("--kv-cache-usage-set-point=%g: must be in [%g, 1]", kv, policy.MinSetPoint))
	}
	if u := f.UnknownSaturation; !(u >= 0) || u > policy.MaxUnknownSaturation {
		errs = append(errs, fmt.Errorf("--unknown-pod-saturation=%g: must be in [0, %g]", u, policy.MaxUnknownSaturation))
	}
	return errs
}
