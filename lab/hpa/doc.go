// Package hpa models the replica computation of the Kubernetes 1.37
// HorizontalPodAutoscaler controller (kube-controller-manager), so that a simulation
// can ask "what would this HPA do?" on a virtual clock, deterministically, one
// reconcile at a time.
//
// It is written from the controller's source, k8s.io/kubernetes v1.37.2,
// pkg/controller/podautoscaler (horizontal.go, replica_calculator.go and
// metrics/utilization.go), and the API defaulting and validation of
// pkg/apis/autoscaling/v2/defaults.go and pkg/apis/autoscaling/validation. No code is
// copied; every function names the upstream function it mirrors, and the tests
// check each rule on hand-computed cases.
//
// # What is modelled
//
//   - One reconcile ([Controller.Sync]) per sync period (--horizontal-pod-autoscaler-sync-period,
//     15 s): the caller calls Sync at the times the controller's work queue would
//     (every SyncPeriod after the previous reconcile).
//   - Metric types External (targets Value and AverageValue), Pods (AverageValue),
//     Object (Value and AverageValue) and Resource / ContainerResource (Utilization
//     and AverageValue), with the replica calculator's readiness rules: pods that are
//     Pending or (for cpu) not yet ready are left out of a scale-down and counted at
//     0 in a scale-up; pods missing a metric count at the target (or 100 % of their
//     request) in a scale-down and at 0 in a scale-up; a proposal whose direction
//     flips once they are counted is dropped.
//   - Tolerance: the global --horizontal-pod-autoscaler-tolerance (0.1) and the
//     per-HPA spec.behavior.scaleUp/scaleDown.tolerance (GA in 1.37).
//   - The largest proposal over the metrics wins; a metric in error blocks a
//     scale-down but not a scale-up.
//   - Without spec.behavior: the downscale stabilization window
//     (--horizontal-pod-autoscaler-downscale-stabilization, 5 min) and the scale-up
//     limit max(2 × current, 4). With spec.behavior (defaulted as the API server
//     does): both stabilization windows over the history of recommendations, the
//     Pods and Percent policies over the history of scale events, selectPolicy Max,
//     Min and Disabled.
//   - minReplicas, maxReplicas and scale to zero (feature HPAScaleToZero, beta and
//     on in 1.37): the controller scales to 0 only with an Object or External
//     metric, records the ScaledToZero condition, and computes metrics at 0
//     replicas only while that condition is True; at 0 replicas an External Value
//     target gives ceil(sum / target) and an AverageValue target ceil(sum /
//     targetPerPod).
//   - The status conditions AbleToScale, ScalingActive, ScalingLimited and
//     ScaledToZero with the controller's reasons.
//
// # What is not
//
// Events, the API round trips (a rescale always succeeds), the selector-overlap
// check between HPAs, the controller's own metrics, and the HPAGeneration status
// field. Time never comes from a clock: every call takes the current virtual time.
package hpa
