// Package policy is the metric catalog and the rules that turn a pool of pods'
// histories (pkg/history) into the one value an HPA is served.
//
// A Policy is one entry of the catalog: the metric name an HPA asks for, its
// Kind (the mean or the sum of per-pod saturations, or one raw signal), its
// terms with their set points, and the rules for pods without data. A pod's
// saturation is the maximum over its terms of value / set point (1.0 = at the
// set point), as the Gateway API inference extension's saturation detector
// fuses queue depth and KV-cache usage; latency terms are pooled over the pods'
// observations. Engine states (wedged, frozen, sleeping, clipped) decide when a
// pod's own numbers cannot be believed.
//
// PoolBuilder folds the pods of a pool into a Pool under one policy. It is the
// adapter's one pooling path: the External metrics, the per-pod metrics,
// explain and the lab's simulator all use it, so they agree by construction.
package policy
