// Package history keeps one pod's recent readings (pkg/signals) and what the
// metric catalog's policies read from them, precomputed when a reading arrives:
//
//   - windows: per (window, model) a policy needs, the counters' increases
//     (resets count whole, as PromQL's increase does) and the latency
//     histograms' new observations;
//   - engine facts: over the state window, whether requests waited or ran in
//     every reading, whether tokens, prompts and finished requests moved, and
//     whether the gauges stood still — what pkg/policy judges engine states
//     (wedged, frozen, sleeping, clipped) from.
//
// A History is immutable: Append returns a new one, so readers never lock.
// When windows are kept, the readings older than the newest hold their
// latency histograms packed (whole counts as variable-length integers, see
// pack.go): 15–40 % of their memory as parsed, every window equal bit for
// bit.
// NewSnapshot builds one from aggregates a time-series database computed
// (--source=prometheus), so both sources share every later rule.
package history
