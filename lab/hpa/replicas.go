package hpa

import (
	"errors"
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PodMetric is one pod's sample of a Pods or Resource metric, as the metrics
// client returns it (pkg/controller/podautoscaler/metrics/interfaces.go:
// PodMetric).
type PodMetric struct {
	// Timestamp is when the sample was taken and Window what it averages over (the
	// resource metrics API's window; the controller reads it for cpu only).
	Timestamp time.Time
	Window    time.Duration
	// Value is the sample in milli-units (Quantity.MilliValue()).
	Value int64
}

// PodMetricsInfo maps pod names to their samples (metrics/interfaces.go:
// PodMetricsInfo).
type PodMetricsInfo map[string]PodMetric

// MetricsClient is what the controller reads metrics from: the resource, custom and
// external metrics APIs (pkg/controller/podautoscaler/metrics/interfaces.go:
// MetricsClient), narrowed to one HPA's namespace. Values are milli-units. Any
// error becomes the metric's error: the HPA then does not scale down on it.
type MetricsClient interface {
	// GetResourceMetric returns the usage of resource by the pods of podSelector
	// (summed over containers, or only container when it is not empty).
	GetResourceMetric(resource corev1.ResourceName, podSelector labels.Selector, container string) (PodMetricsInfo, time.Time, error)
	// GetRawMetric returns the per-pod values of the Pods metric metricName.
	GetRawMetric(metricName string, podSelector, metricSelector labels.Selector) (PodMetricsInfo, time.Time, error)
	// GetObjectMetric returns the value of metricName for one object.
	GetObjectMetric(metricName string, object autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int64, time.Time, error)
	// GetExternalMetric returns the values of every item of the External metric
	// metricName for metricSelector.
	GetExternalMetric(metricName string, metricSelector labels.Selector) ([]int64, time.Time, error)
}

// Tolerances are the usage-ratio band within which the HPA does not scale
// (replica_calculator.go: Tolerances): no change while
// 1 - ScaleDown <= ratio <= 1 + ScaleUp.
type Tolerances struct {
	ScaleDown, ScaleUp float64
}

// within mirrors replica_calculator.go: Tolerances.isWithin.
func (t Tolerances) within(ratio float64) bool {
	return 1-t.ScaleDown <= ratio && ratio <= 1+t.ScaleUp
}

// calculator holds the settings of the replica calculator
// (replica_calculator.go: ReplicaCalculator) and the time of the reconcile.
type calculator struct {
	cpuInitializationPeriod       time.Duration
	delayOfInitialReadinessStatus time.Duration
	now                           time.Time
}

// podReady mirrors k8s.io/kubernetes/pkg/api/v1/pod: IsPodReady.
func podReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// groupPods sorts pods into ready ones (counted), unready, missing a metric and
// ignored (deleted or failed), mirroring replica_calculator.go: groupPods. Pending
// pods are unready; for cpu only, a pod also counts as unready while it is not
// Ready (or its sample predates readiness) within the CPU initialization period,
// and after it if it has never been ready.
func (c calculator) groupPods(pods []*corev1.Pod, metrics PodMetricsInfo, resource corev1.ResourceName) (ready int, unready, missing, ignored map[string]bool) {
	unready, missing, ignored = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			ignored[pod.Name] = true
			continue
		}
		if pod.Status.Phase == corev1.PodPending {
			unready[pod.Name] = true
			continue
		}
		m, found := metrics[pod.Name]
		if !found {
			missing[pod.Name] = true
			continue
		}
		if resource == corev1.ResourceCPU {
			cond := readyCondition(pod)
			var isUnready bool
			if cond == nil || pod.Status.StartTime == nil {
				isUnready = true
			} else if pod.Status.StartTime.Add(c.cpuInitializationPeriod).After(c.now) {
				isUnready = cond.Status == corev1.ConditionFalse || m.Timestamp.Before(cond.LastTransitionTime.Add(m.Window))
			} else {
				isUnready = cond.Status == corev1.ConditionFalse && pod.Status.StartTime.Add(c.delayOfInitialReadinessStatus).After(cond.LastTransitionTime.Time)
			}
			if isUnready {
				unready[pod.Name] = true
				continue
			}
		}
		ready++
	}
	return ready, unready, missing, ignored
}

// removeMetrics deletes the samples of pods (replica_calculator.go: removeMetricsForPods).
func removeMetrics(metrics PodMetricsInfo, pods map[string]bool) {
	for name := range pods {
		delete(metrics, name)
	}
}

// resourceUtilizationRatio mirrors metrics/utilization.go: GetResourceUtilizationRatio,
// integer arithmetic included: utilization = (sum of usage × 100) / (sum of
// requests), truncated, over the pods that have a request.
func resourceUtilizationRatio(metrics PodMetricsInfo, requests map[string]int64, target int32) (ratio float64, utilization int32, rawAverage int64, err error) {
	var total, requestsTotal int64
	n := 0
	for name, m := range metrics {
		r, ok := requests[name]
		if !ok {
			continue
		}
		total += m.Value
		requestsTotal += r
		n++
	}
	if requestsTotal == 0 {
		return 0, 0, 0, errors.New("no metrics returned matched known pods")
	}
	utilization = int32(total * 100 / requestsTotal)
	return float64(utilization) / float64(target), utilization, total / int64(n), nil
}

// metricUsageRatio mirrors metrics/utilization.go: GetMetricUsageRatio: the
// integer mean of the samples over the target.
func metricUsageRatio(metrics PodMetricsInfo, target int64) (ratio float64, usage int64) {
	var total int64
	for _, m := range metrics {
		total += m.Value
	}
	usage = total / int64(len(metrics))
	return float64(usage) / float64(target), usage
}

// podRequests mirrors replica_calculator.go: calculateRequests: per pod, the
// pod-level request of resource when the pod sets pod-level requests and no
// container is named (feature PodLevelResources), else the sum of its containers'
// (and restartable init containers') requests, or only the named container's. A
// container without a request of resource is an error.
func podRequests(pods []*corev1.Pod, container string, resource corev1.ResourceName) (map[string]int64, error) {
	out := make(map[string]int64, len(pods))
	for _, pod := range pods {
		if container == "" && pod.Spec.Resources != nil && len(pod.Spec.Resources.Requests) > 0 {
			q, ok := pod.Spec.Resources.Requests[resource]
			if !ok {
				return nil, fmt.Errorf("missing pod-level request for %s in Pod %s", resource, pod.Name)
			}
			out[pod.Name] = q.MilliValue()
			continue
		}
		containers := append([]corev1.Container(nil), pod.Spec.Containers...)
		for _, c := range pod.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				containers = append(containers, c)
			}
		}
		var total int64
		found := container == ""
		for _, c := range containers {
			if container != "" && c.Name != container {
				continue
			}
			q, ok := c.Resources.Requests[resource]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", resource, c.Name, pod.Name)
			}
			total += q.MilliValue()
			found = true
			if container != "" {
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("container %s not found in Pod %s", container, pod.Name)
		}
		out[pod.Name] = total
	}
	return out, nil
}

// resourceReplicas mirrors replica_calculator.go: GetResourceReplicas for a
// Utilization target. It returns the proposal, the current utilization (percent)
// and the raw average usage.
func (c calculator) resourceReplicas(current int32, target int32, resource corev1.ResourceName, tol Tolerances,
	pods []*corev1.Pod, metrics PodMetricsInfo, container string) (int32, int32, int64, error) {
	if len(pods) == 0 {
		return 0, 0, 0, errors.New("no pods returned by selector while calculating replica count")
	}
	ready, unready, missing, ignored := c.groupPods(pods, metrics, resource)
	removeMetrics(metrics, ignored)
	removeMetrics(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, 0, errors.New("did not receive metrics for targeted pods (pods might be unready)")
	}
	requests, err := podRequests(pods, container, resource)
	if err != nil {
		return 0, 0, 0, err
	}
	ratio, utilization, raw, err := resourceUtilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, 0, 0, err
	}
	scaleUpWithUnready := len(unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if tol.within(ratio) {
			return current, utilization, raw, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), utilization, raw, nil
	}
	// A scale-down counts missing pods at 100 % of their request, or at the
	// target when it is above 100 %.
	fallback := int64(max(100, target))
	countUnsampled(metrics, missing, unready, ratio, scaleUpWithUnready, func(name string) int64 { return requests[name] * fallback / 100 })
	newRatio, _, _, err := resourceUtilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, utilization, raw, err
	}
	return recountedProposal(current, ratio, newRatio, len(metrics), tol), utilization, raw, nil
}

// plainReplicas mirrors replica_calculator.go: calcPlainMetricReplicas, used for
// Pods metrics and Resource AverageValue targets: the same rules with the mean
// sample against an absolute target, and missing pods counted at the target in a
// scale-down.
func (c calculator) plainReplicas(metrics PodMetricsInfo, current int32, target int64, tol Tolerances,
	pods []*corev1.Pod, resource corev1.ResourceName) (int32, int64, error) {
	if len(pods) == 0 {
		return 0, 0, errors.New("no pods returned by selector while calculating replica count")
	}
	ready, unready, missing, ignored := c.groupPods(pods, metrics, resource)
	removeMetrics(metrics, ignored)
	removeMetrics(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, errors.New("did not receive metrics for targeted pods (pods might be unready)")
	}
	ratio, usage := metricUsageRatio(metrics, target)
	scaleUpWithUnready := len(unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if tol.within(ratio) {
			return current, usage, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), usage, nil
	}
	countUnsampled(metrics, missing, unready, ratio, scaleUpWithUnready, func(string) int64 { return target })
	newRatio, _ := metricUsageRatio(metrics, target)
	return recountedProposal(current, ratio, newRatio, len(metrics), tol), usage, nil
}

// countUnsampled mirrors the step GetResourceReplicas and
// calcPlainMetricReplicas (replica_calculator.go) share once the first ratio is
// known: the pods missing a sample count at scaleDownValue(pod) in a scale-down
// (ratio < 1) and at 0 in a scale-up (ratio > 1); with scaleUpWithUnready the
// unready pods count at 0 too.
func countUnsampled(metrics PodMetricsInfo, missing, unready map[string]bool, ratio float64, scaleUpWithUnready bool, scaleDownValue func(pod string) int64) {
	if len(missing) > 0 {
		if ratio < 1.0 {
			for name := range missing {
				metrics[name] = PodMetric{Value: scaleDownValue(name)}
			}
		} else if ratio > 1.0 {
			for name := range missing {
				metrics[name] = PodMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = PodMetric{Value: 0}
		}
	}
}

// recountedProposal mirrors the last step GetResourceReplicas and
// calcPlainMetricReplicas share: with the unsampled pods counted (newRatio over
// pods samples), no change when the new ratio is within tolerance, points the
// other way than the first one (ratio), or gives a proposal that moves against
// it; else ceil(newRatio × pods).
func recountedProposal(current int32, ratio, newRatio float64, pods int, tol Tolerances) int32 {
	if tol.within(newRatio) || (ratio < 1.0 && newRatio > 1.0) || (ratio > 1.0 && newRatio < 1.0) {
		return current
	}
	proposal := int32(math.Ceil(newRatio * float64(pods)))
	if (newRatio < 1.0 && proposal > current) || (newRatio > 1.0 && proposal < current) {
		return current
	}
	return proposal
}

// readyPodCount mirrors replica_calculator.go: getReadyPodsCount: Running pods
// whose Ready condition is True (terminating ones included).
func readyPodCount(pods []*corev1.Pod) (int64, error) {
	if len(pods) == 0 {
		return 0, errors.New("no pods returned by selector while calculating replica count")
	}
	var n int64
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning && podReady(p) {
			n++
		}
	}
	return n, nil
}

// usageRatioReplicas mirrors replica_calculator.go: getUsageRatioReplicaCount, the
// rule of External Value and Object Value targets: within tolerance, no change;
// else ceil(ratio × ready pods), capped at MaxInt32. At 0 current replicas the
// ready pods and the tolerance are ignored: ceil(ratio).
func usageRatioReplicas(current int32, ratio float64, tol Tolerances, pods []*corev1.Pod) (int32, error) {
	if current == 0 {
		return ceilInt32(ratio), nil
	}
	if tol.within(ratio) {
		return current, nil
	}
	ready, err := readyPodCount(pods)
	if err != nil {
		return 0, fmt.Errorf("unable to calculate ready pods: %w", err)
	}
	return ceilInt32(ratio * float64(ready)), nil
}

// ceilInt32 rounds f up to an int32, saturating at MaxInt32 (the controller caps
// its External and Object proposals this way).
func ceilInt32(f float64) int32 {
	if f > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(math.Ceil(f))
}

// sumCapped adds values, saturating at MaxInt64 as the controller does.
func sumCapped(values []int64) int64 {
	var usage int64
	for _, v := range values {
		if v > 0 && usage > math.MaxInt64-v {
			return math.MaxInt64
		}
		usage += v
	}
	return usage
}

// perPodReplicas is the rule of External and Object AverageValue targets
// (replica_calculator.go: GetExternalPerPodMetricReplicas and
// GetObjectPerPodMetricReplicas): the ratio is usage / (target × status
// replicas); outside tolerance the proposal is ceil(usage / target), capped at
// MaxInt32. It returns the proposal and the per-pod usage reported in the status
// (0 when there are no status replicas, where the controller's own division is
// undefined).
func perPodReplicas(statusReplicas int32, usage, target int64, tol Tolerances) (int32, int64) {
	proposal := statusReplicas
	ratio := float64(usage) / (float64(target) * float64(statusReplicas))
	if !tol.within(ratio) {
		proposal = ceilInt32(float64(usage) / float64(target))
	}
	if statusReplicas == 0 {
		return proposal, 0
	}
	if float64(usage) >= math.MaxInt64 {
		return proposal, math.MaxInt64
	}
	return proposal, int64(math.Ceil(float64(usage) / float64(statusReplicas)))
}
