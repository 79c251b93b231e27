package hpa

import (
	"errors"
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Options are the kube-controller-manager settings that shape the HPA controller.
// Defaults: [DefaultOptions].
type Options struct {
	// SyncPeriod is --horizontal-pod-autoscaler-sync-period: the time between two
	// reconciles of one HPA. The model does not schedule itself; callers use it.
	SyncPeriod time.Duration
	// Tolerance is --horizontal-pod-autoscaler-tolerance, used for a direction
	// whose behavior sets no tolerance of its own.
	Tolerance float64
	// DownscaleStabilizationWindow is
	// --horizontal-pod-autoscaler-downscale-stabilization: the scale-down window
	// without spec.behavior, or when spec.behavior.scaleDown sets none.
	DownscaleStabilizationWindow time.Duration
	// CPUInitializationPeriod is --horizontal-pod-autoscaler-cpu-initialization-period
	// and InitialReadinessDelay --horizontal-pod-autoscaler-initial-readiness-delay:
	// the readiness rules for cpu samples.
	CPUInitializationPeriod, InitialReadinessDelay time.Duration
	// ScaleToZero is the HPAScaleToZero feature gate (beta, on by default in 1.37).
	ScaleToZero bool
}

// DefaultOptions returns kube-controller-manager 1.37's defaults
// (pkg/controller/podautoscaler/config/v1alpha1/defaults.go:
// RecommendedDefaultHPAControllerConfiguration, and pkg/features/kube_features.go for
// HPAScaleToZero): sync period 15 s, tolerance 0.1, downscale stabilization 5 min,
// cpu initialization period 5 min, initial readiness delay 30 s, scale to zero on.
func DefaultOptions() Options {
	return Options{
		SyncPeriod:                   15 * time.Second,
		Tolerance:                    0.1,
		DownscaleStabilizationWindow: 5 * time.Minute,
		CPUInitializationPeriod:      5 * time.Minute,
		InitialReadinessDelay:        30 * time.Second,
		ScaleToZero:                  true,
	}
}

// Validate reports every invalid option at once.
func (o Options) Validate() error {
	var errs []error
	if o.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("sync period must be > 0, got %v", o.SyncPeriod))
	}
	if !(o.Tolerance >= 0) || math.IsInf(o.Tolerance, 0) {
		errs = append(errs, fmt.Errorf("tolerance must be a finite number >= 0, got %g", o.Tolerance))
	}
	if o.DownscaleStabilizationWindow < 0 {
		errs = append(errs, fmt.Errorf("downscale stabilization window must be >= 0, got %v", o.DownscaleStabilizationWindow))
	}
	if o.CPUInitializationPeriod < 0 || o.InitialReadinessDelay < 0 {
		errs = append(errs, fmt.Errorf("cpu initialization period and initial readiness delay must be >= 0, got %v and %v",
			o.CPUInitializationPeriod, o.InitialReadinessDelay))
	}
	return errors.Join(errs...)
}

// Scale is the scale subresource of the HPA's target as the controller reads it.
type Scale struct {
	// SpecReplicas is scale.spec.replicas: the replicas the target is asked to run
	// (the controller's "current replicas").
	SpecReplicas int32
	// StatusReplicas is scale.status.replicas: for a Deployment, its
	// non-terminated pods, Ready or not (the divisor of AverageValue tolerance).
	StatusReplicas int32
	// Selector is scale.status.selector: it selects the target's pods and is
	// passed to the metrics client. Nil means everything.
	Selector labels.Selector
}

// Result is the outcome of one reconcile.
type Result struct {
	// DesiredReplicas is the replica count the target has after the reconcile: the
	// new scale when Rescale, else the current one.
	DesiredReplicas int32
	// Rescale reports whether the controller wrote a new scale.
	Rescale bool
	// Reason is the controller's rescale reason ("<metric> above target", "All
	// metrics below target", "Current number of replicas below Spec.MinReplicas",
	// ...); empty when nothing changed.
	Reason string
	// MetricReplicas is the largest proposal over the metrics before
	// normalization; -1 when the metrics could not be used (Err is set) and 0 when
	// no metric was computed.
	MetricReplicas int32
	// Err is the metrics error, if any: with MetricReplicas -1 the HPA did
	// nothing; otherwise it still scaled up on the metrics that worked.
	Err error
}

type timedRecommendation struct {
	replicas int32
	at       time.Time
}

type scaleEvent struct {
	change   int32 // absolute value
	at       time.Time
	outdated bool
}

// Controller is the model of one HPA under the HorizontalController: it keeps the
// state the real controller keeps in memory for that HPA (the recommendations and
// scale events) and the HPA's status. Not safe for concurrent use.
type Controller struct {
	opts            Options
	hpa             *autoscalingv2.HorizontalPodAutoscaler
	recommendations []timedRecommendation
	scaleUps        []scaleEvent
	scaleDowns      []scaleEvent
}

// New returns the model of h under opts. h must already carry the API server's
// defaults (see [SetDefaults] and [Parse]); it is validated and deep-copied, its
// status kept as the starting status.
func New(h *autoscalingv2.HorizontalPodAutoscaler, opts Options) (*Controller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("nil HorizontalPodAutoscaler")
	}
	if h.Spec.MinReplicas == nil {
		return nil, errors.New("spec.minReplicas is not set: apply SetDefaults first")
	}
	if b := h.Spec.Behavior; b != nil && (b.ScaleUp == nil || b.ScaleDown == nil || b.ScaleUp.SelectPolicy == nil ||
		b.ScaleDown.SelectPolicy == nil || b.ScaleUp.StabilizationWindowSeconds == nil) {
		return nil, errors.New("spec.behavior is not defaulted: apply SetDefaults first")
	}
	if err := Validate(h, opts.ScaleToZero); err != nil {
		return nil, err
	}
	return &Controller{opts: opts, hpa: h.DeepCopy()}, nil
}

// HPA returns a copy of the HPA with the status the model maintains (current
// and desired replicas, current metrics, last scale time and conditions).
func (c *Controller) HPA() *autoscalingv2.HorizontalPodAutoscaler { return c.hpa.DeepCopy() }

// Sync runs one reconcile at now, mirroring horizontal.go:
// (*HorizontalController).reconcileAutoscaler from the point where the scale was
// read: clamp to [minReplicas, maxReplicas], compute the metrics, normalize the
// proposal (with or without behavior), scale, and update the status. pods are the
// pods the target's selector selects (the controller's pod lister, terminating
// pods included); mc answers the metric queries.
func (c *Controller) Sync(now time.Time, scale Scale, pods []*corev1.Pod, mc MetricsClient) Result {
	h := c.hpa
	c.setCondition(now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale", "the HPA controller was able to get the target's current scale")
	current := scale.SpecReplicas
	if c.recommendations == nil { // recordInitialRecommendation
		c.recommendations = []timedRecommendation{{current, now}}
	}
	minReplicas := *h.Spec.MinReplicas
	scaledToZero := c.opts.ScaleToZero && c.conditionTrue(autoscalingv2.ScaledToZero)
	objectOrExternal := hasObjectOrExternal(h)

	desired, reason, compute, rescale := c.replicasBeforeMetrics(now, current, minReplicas, scaledToZero, objectOrExternal)
	var (
		statuses []autoscalingv2.MetricStatus
		res      = Result{}
	)
	if compute {
		proposal, metric, st, err := c.computeReplicasForMetrics(now, scale, pods, mc)
		statuses = st
		res.MetricReplicas, res.Err = proposal, err
		if err != nil && proposal == -1 {
			c.setStatus(now, current, h.Status.DesiredReplicas, statuses, false)
			return Result{DesiredReplicas: current, MetricReplicas: -1, Err: err}
		}
		desired, reason = c.replicasFromMetrics(now, current, minReplicas, scaledToZero, proposal, metric)
		rescale = desired != current
	}

	if rescale {
		c.recordRescale(now, current, desired, minReplicas, objectOrExternal)
	} else {
		desired, reason = current, ""
	}
	c.setStatus(now, current, desired, statuses, rescale)
	res.DesiredReplicas, res.Rescale, res.Reason = desired, rescale, reason
	return res
}

// replicasBeforeMetrics mirrors the part of reconcileAutoscaler that decides
// whether the metrics are read at all: a target above maxReplicas or below
// minReplicas is brought back without them (desired and reason set, compute
// false), and a target at zero replicas stays there unless the HPA scaled it to
// zero (shouldComputeMetricsForZeroReplicas; compute and rescale false, scaling
// reported disabled). Otherwise compute and rescale are true and desired 0.
func (c *Controller) replicasBeforeMetrics(now time.Time, current, minReplicas int32, scaledToZero, objectOrExternal bool) (desired int32, reason string, compute, rescale bool) {
	canScaleFromZero := scaledToZero && objectOrExternal
	switch {
	case current == 0:
		// shouldComputeMetricsForZeroReplicas: a target scaled to zero by hand stays
		// there; one the HPA scaled to zero is watched.
		if !((minReplicas != 0 && scaledToZero) || canScaleFromZero) {
			c.setCondition(now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled", "scaling is disabled since the replica count of the target is zero")
			if !c.opts.ScaleToZero {
				c.removeCondition(autoscalingv2.ScaledToZero)
			}
			return 0, "", false, false
		}
	case current > c.hpa.Spec.MaxReplicas:
		return c.hpa.Spec.MaxReplicas, "Current number of replicas above Spec.MaxReplicas", false, true
	case current < minReplicas:
		return minReplicas, "Current number of replicas below Spec.MinReplicas", false, true
	}
	return 0, "", true, true
}

// replicasFromMetrics mirrors the part of reconcileAutoscaler that turns the
// metrics' proposal (from computeReplicasForMetrics, named by metric) into the
// desired replicas and the rescale reason: the proposal, normalized with or
// without spec.behavior (normalizeDesiredReplicas,
// normalizeDesiredReplicasWithBehaviors), and at least minReplicas when the HPA
// brings a target back from zero.
func (c *Controller) replicasFromMetrics(now time.Time, current, minReplicas int32, scaledToZero bool, proposal int32, metric string) (desired int32, reason string) {
	rescaleMetric := ""
	if proposal > desired { // desired starts at 0, as in reconcileAutoscaler
		desired, rescaleMetric = proposal, metric
	}
	if desired > current {
		reason = rescaleMetric + " above target"
	}
	if desired < current {
		reason = "All metrics below target"
	}
	if c.hpa.Spec.Behavior == nil {
		desired = c.normalize(now, current, desired, minReplicas)
	} else {
		desired = c.normalizeWithBehaviors(now, current, desired, minReplicas)
	}
	if current == 0 && minReplicas != 0 && scaledToZero && desired < minReplicas {
		desired = minReplicas
		if reason == "" {
			reason = "Current number of replicas below Spec.MinReplicas"
		}
	}
	return desired, reason
}

// recordRescale mirrors what reconcileAutoscaler does once it has written a new
// scale: the AbleToScale condition, the scale event (storeScaleEvent) and, with
// HPAScaleToZero, the ScaledToZero condition (True only when an HPA with
// minReplicas 0 and an Object or External metric took the target to zero).
func (c *Controller) recordRescale(now time.Time, current, desired, minReplicas int32, objectOrExternal bool) {
	c.setCondition(now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale", "the HPA controller was able to update the target scale to %d", desired)
	c.storeScaleEvent(now, current, desired)
	if !c.opts.ScaleToZero {
		c.removeCondition(autoscalingv2.ScaledToZero)
		return
	}
	if current > 0 && desired == 0 && minReplicas == 0 && objectOrExternal {
		c.setCondition(now, autoscalingv2.ScaledToZero, corev1.ConditionTrue, "ScaledToZero", "the HPA controller scaled the workload to zero")
	} else {
		c.setCondition(now, autoscalingv2.ScaledToZero, corev1.ConditionFalse, "NotScaledToZero", "the HPA controller did not scale the workload to zero")
	}
}

// computeReplicasForMetrics mirrors horizontal.go:
// (*HorizontalController).computeReplicasForMetrics: the largest proposal over the
// metrics; -1 and an error when every metric failed, or when one failed and the
// others would scale down.
func (c *Controller) computeReplicasForMetrics(now time.Time, scale Scale, pods []*corev1.Pod, mc MetricsClient) (int32, string, []autoscalingv2.MetricStatus, error) {
	specs := c.hpa.Spec.Metrics
	statuses := make([]autoscalingv2.MetricStatus, len(specs))
	var (
		replicas       int32
		metric         string
		invalid        int
		firstErr       error
		firstCondition autoscalingv2.HorizontalPodAutoscalerCondition
	)
	for i, spec := range specs {
		proposal, name, cond, err := c.computeReplicasForMetric(now, spec, scale, pods, mc, &statuses[i])
		if err != nil {
			if invalid == 0 {
				firstErr, firstCondition = err, cond
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("invalid metrics (%d invalid out of %d), first error is: %w", invalid, len(specs), firstErr)
	}
	if invalid >= len(specs) || (invalid > 0 && replicas < scale.SpecReplicas) {
		c.setCondition(now, firstCondition.Type, firstCondition.Status, firstCondition.Reason, "%s", firstCondition.Message)
		return -1, "", statuses, firstErr
	}
	c.setCondition(now, autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from %s", metric)
	return replicas, metric, statuses, firstErr
}

// computeReplicasForMetric mirrors horizontal.go:
// (*HorizontalController).computeReplicasForMetric: it hands the metric to the
// computeStatusFor* function of its source type, which returns the metric's
// proposal, its description and status, or the ScalingActive=False condition
// of its error.
func (c *Controller) computeReplicasForMetric(now time.Time, spec autoscalingv2.MetricSpec, scale Scale, pods []*corev1.Pod,
	mc MetricsClient, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	selector := scale.Selector
	if selector == nil {
		selector = labels.Everything()
	}
	in := metricInputs{
		calc:  calculator{cpuInitializationPeriod: c.opts.CPUInitializationPeriod, delayOfInitialReadinessStatus: c.opts.InitialReadinessDelay, now: now},
		tol:   c.tolerances(),
		scale: scale, selector: selector, pods: pods, mc: mc,
	}
	switch spec.Type {
	case autoscalingv2.ExternalMetricSourceType:
		return in.externalStatus(spec, status)
	case autoscalingv2.ObjectMetricSourceType:
		return in.objectStatus(spec, status)
	case autoscalingv2.PodsMetricSourceType:
		return in.podsStatus(spec, status)
	case autoscalingv2.ResourceMetricSourceType:
		return in.resourceStatus(spec, status)
	case autoscalingv2.ContainerResourceMetricSourceType:
		return in.containerResourceStatus(spec, status)
	}
	return unableToCompute("InvalidMetricSourceType", fmt.Errorf("unknown metric source type %q", spec.Type))
}

// metricInputs are what every computeStatusFor* function reads besides the
// metric's spec: the replica calculator, the tolerances, the scale and its
// selector (everything when the scale has none), the target's pods and the
// metrics client.
type metricInputs struct {
	calc     calculator
	tol      Tolerances
	scale    Scale
	selector labels.Selector
	pods     []*corev1.Pod
	mc       MetricsClient
}

// unableToCompute mirrors horizontal.go:
// (*HorizontalController).getUnableComputeReplicaCountCondition: the result of a
// metric that failed with err, its condition ScalingActive=False for reason.
func unableToCompute(reason string, err error) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	return 0, "", autoscalingv2.HorizontalPodAutoscalerCondition{
		Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse, Reason: reason,
		Message: fmt.Sprintf("the HPA was unable to compute the replica count: %v", err),
	}, err
}

// milliQuantity returns v milli-units as a decimal quantity.
func milliQuantity(v int64) *resource.Quantity {
	return resource.NewMilliQuantity(v, resource.DecimalSI)
}

// externalStatus mirrors horizontal.go:
// (*HorizontalController).computeStatusForExternalMetric: the sum of the metric's
// items against an AverageValue target (per status replica) or a Value target.
func (in metricInputs) externalStatus(spec autoscalingv2.MetricSpec, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	const reason = "FailedGetExternalMetric"
	ext := spec.External
	ms, err := metav1.LabelSelectorAsSelector(ext.Metric.Selector)
	if err != nil {
		return unableToCompute(reason, err)
	}
	values, _, err := in.mc.GetExternalMetric(ext.Metric.Name, ms)
	if err != nil {
		return unableToCompute(reason, fmt.Errorf("unable to get external metric %s/%+v: %w", ext.Metric.Name, ext.Metric.Selector, err))
	}
	usage := sumCapped(values)
	name := fmt.Sprintf("external metric %s(%+v)", ext.Metric.Name, ext.Metric.Selector)
	st := autoscalingv2.MetricStatus{Type: spec.Type, External: &autoscalingv2.ExternalMetricStatus{Metric: ext.Metric}}
	switch {
	case ext.Target.AverageValue != nil:
		proposal, perPod := perPodReplicas(in.scale.StatusReplicas, usage, ext.Target.AverageValue.MilliValue(), in.tol)
		st.External.Current.AverageValue = milliQuantity(perPod)
		*status = st
		return proposal, name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case ext.Target.Value != nil:
		ratio := float64(usage) / float64(ext.Target.Value.MilliValue())
		proposal, err := usageRatioReplicas(in.scale.SpecReplicas, ratio, in.tol, in.pods)
		if err != nil {
			return unableToCompute(reason, err)
		}
		st.External.Current.Value = milliQuantity(usage)
		*status = st
		return proposal, name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	}
	return unableToCompute(reason, errors.New("invalid external metric source: neither a value target nor an average value target was set"))
}

// objectStatus mirrors horizontal.go:
// (*HorizontalController).computeStatusForObjectMetric: one object's value
// against a Value target or an AverageValue target (per status replica).
func (in metricInputs) objectStatus(spec autoscalingv2.MetricSpec, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	const reason = "FailedGetObjectMetric"
	obj := spec.Object
	ms, err := metav1.LabelSelectorAsSelector(obj.Metric.Selector)
	if err != nil {
		return unableToCompute(reason, err)
	}
	usage, _, err := in.mc.GetObjectMetric(obj.Metric.Name, obj.DescribedObject, ms)
	if err != nil {
		return unableToCompute(reason, fmt.Errorf("unable to get metric %s on %s %s: %w", obj.Metric.Name, obj.DescribedObject.Kind, obj.DescribedObject.Name, err))
	}
	st := autoscalingv2.MetricStatus{Type: spec.Type, Object: &autoscalingv2.ObjectMetricStatus{DescribedObject: obj.DescribedObject, Metric: obj.Metric}}
	switch {
	case obj.Target.Type == autoscalingv2.ValueMetricType && obj.Target.Value != nil:
		proposal, err := usageRatioReplicas(in.scale.SpecReplicas, float64(usage)/float64(obj.Target.Value.MilliValue()), in.tol, in.pods)
		if err != nil {
			return unableToCompute(reason, err)
		}
		st.Object.Current.Value = milliQuantity(usage)
		*status = st
		return proposal, fmt.Sprintf("%s metric %s", obj.DescribedObject.Kind, obj.Metric.Name), autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case obj.Target.Type == autoscalingv2.AverageValueMetricType && obj.Target.AverageValue != nil:
		proposal, perPod := perPodReplicas(in.scale.StatusReplicas, usage, obj.Target.AverageValue.MilliValue(), in.tol)
		st.Object.Current.AverageValue = milliQuantity(perPod)
		*status = st
		return proposal, fmt.Sprintf("external metric %s(%+v)", obj.Metric.Name, obj.Metric.Selector), autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	}
	return unableToCompute(reason, errors.New("invalid object metric source: neither a value target nor an average value target was set"))
}

// podsStatus mirrors horizontal.go:
// (*HorizontalController).computeStatusForPodsMetric: the pods' mean sample
// against the AverageValue target.
func (in metricInputs) podsStatus(spec autoscalingv2.MetricSpec, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	const reason = "FailedGetPodsMetric"
	pm := spec.Pods
	ms, err := metav1.LabelSelectorAsSelector(pm.Metric.Selector)
	if err != nil {
		return unableToCompute(reason, err)
	}
	metrics, _, err := in.mc.GetRawMetric(pm.Metric.Name, in.selector, ms)
	if err != nil {
		return unableToCompute(reason, fmt.Errorf("unable to get metric %s: %w", pm.Metric.Name, err))
	}
	proposal, usage, err := in.calc.plainReplicas(metrics, in.scale.SpecReplicas, pm.Target.AverageValue.MilliValue(), in.tol, in.pods, "")
	if err != nil {
		return unableToCompute(reason, err)
	}
	*status = autoscalingv2.MetricStatus{Type: spec.Type, Pods: &autoscalingv2.PodsMetricStatus{
		Metric: pm.Metric, Current: autoscalingv2.MetricValueStatus{AverageValue: milliQuantity(usage)},
	}}
	return proposal, "pods metric " + pm.Metric.Name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
}

// resourceStatus mirrors horizontal.go:
// (*HorizontalController).computeStatusForResourceMetric.
func (in metricInputs) resourceStatus(spec autoscalingv2.MetricSpec, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	r := spec.Resource
	current, proposal, desc, err := in.resourceProposal(r.Name, "", r.Target, spec.Type)
	if err != nil {
		return unableToCompute("FailedGetResourceMetric", err)
	}
	*status = autoscalingv2.MetricStatus{Type: spec.Type, Resource: &autoscalingv2.ResourceMetricStatus{Name: r.Name, Current: current}}
	return proposal, desc, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
}

// containerResourceStatus mirrors horizontal.go:
// (*HorizontalController).computeStatusForContainerResourceMetric.
func (in metricInputs) containerResourceStatus(spec autoscalingv2.MetricSpec, status *autoscalingv2.MetricStatus) (int32, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	r := spec.ContainerResource
	current, proposal, desc, err := in.resourceProposal(r.Name, r.Container, r.Target, spec.Type)
	if err != nil {
		return unableToCompute("FailedGetContainerResourceMetric", err)
	}
	*status = autoscalingv2.MetricStatus{Type: spec.Type, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: r.Name, Container: r.Container, Current: current}}
	return proposal, desc, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
}

// resourceProposal mirrors horizontal.go: computeStatusForResourceMetricGeneric.
func (in metricInputs) resourceProposal(name corev1.ResourceName, container string, target autoscalingv2.MetricTarget,
	typ autoscalingv2.MetricSourceType) (autoscalingv2.MetricValueStatus, int32, string, error) {
	metrics, _, err := in.mc.GetResourceMetric(name, in.selector, container)
	if err != nil {
		return autoscalingv2.MetricValueStatus{}, 0, "", fmt.Errorf("unable to get metrics for resource %s: %w", name, err)
	}
	if target.AverageValue != nil {
		proposal, usage, err := in.calc.plainReplicas(metrics, in.scale.SpecReplicas, target.AverageValue.MilliValue(), in.tol, in.pods, name)
		if err != nil {
			return autoscalingv2.MetricValueStatus{}, 0, "", fmt.Errorf("failed to get %s usage: %w", name, err)
		}
		return autoscalingv2.MetricValueStatus{AverageValue: quantity(name, usage)}, proposal, fmt.Sprintf("%s resource", name), nil
	}
	if target.AverageUtilization == nil {
		return autoscalingv2.MetricValueStatus{}, 0, "", errors.New("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set")
	}
	proposal, utilization, raw, err := in.calc.resourceReplicas(in.scale.SpecReplicas, *target.AverageUtilization, name, in.tol, in.pods, metrics, container)
	if err != nil {
		return autoscalingv2.MetricValueStatus{}, 0, "", fmt.Errorf("failed to get %s utilization: %w", name, err)
	}
	desc := fmt.Sprintf("%s resource utilization (percentage of request)", name)
	if typ == autoscalingv2.ContainerResourceMetricSourceType {
		desc = fmt.Sprintf("%s container resource utilization (percentage of request)", name)
	}
	return autoscalingv2.MetricValueStatus{AverageUtilization: &utilization, AverageValue: quantity(name, raw)}, proposal, desc, nil
}

// quantity mirrors horizontal.go: buildQuantity.
func quantity(name corev1.ResourceName, milli int64) *resource.Quantity {
	format := resource.DecimalSI
	if name == corev1.ResourceMemory {
		format = resource.BinarySI
	}
	return resource.NewMilliQuantity(milli, format)
}

// tolerances mirrors horizontal.go: (*HorizontalController).tolerancesForHpa with
// HPAConfigurableTolerance on (GA and locked on in 1.37).
func (c *Controller) tolerances() Tolerances {
	t := Tolerances{ScaleDown: c.opts.Tolerance, ScaleUp: c.opts.Tolerance}
	if b := c.hpa.Spec.Behavior; b != nil {
		if b.ScaleDown != nil && b.ScaleDown.Tolerance != nil {
			t.ScaleDown = b.ScaleDown.Tolerance.AsApproximateFloat64()
		}
		if b.ScaleUp != nil && b.ScaleUp.Tolerance != nil {
			t.ScaleUp = b.ScaleUp.Tolerance.AsApproximateFloat64()
		}
	}
	return t
}

func hasObjectOrExternal(h *autoscalingv2.HorizontalPodAutoscaler) bool {
	for _, m := range h.Spec.Metrics {
		if m.Type == autoscalingv2.ObjectMetricSourceType || m.Type == autoscalingv2.ExternalMetricSourceType {
			return true
		}
	}
	return false
}

// setStatus mirrors horizontal.go: (*HorizontalController).setStatus.
func (c *Controller) setStatus(now time.Time, current, desired int32, metrics []autoscalingv2.MetricStatus, rescale bool) {
	st := &c.hpa.Status
	st.CurrentReplicas, st.DesiredReplicas, st.CurrentMetrics = current, desired, metrics
	if rescale {
		t := metav1.NewTime(now)
		st.LastScaleTime = &t
	}
}

// setCondition mirrors horizontal.go: setConditionInList: the transition time
// changes only when the status does.
func (c *Controller) setCondition(now time.Time, typ autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason, format string, args ...any) {
	conds := c.hpa.Status.Conditions
	i := 0
	for ; i < len(conds); i++ {
		if conds[i].Type == typ {
			break
		}
	}
	if i == len(conds) {
		conds = append(conds, autoscalingv2.HorizontalPodAutoscalerCondition{Type: typ})
	}
	if conds[i].Status != status {
		conds[i].LastTransitionTime = metav1.NewTime(now)
	}
	conds[i].Status, conds[i].Reason, conds[i].Message = status, reason, fmt.Sprintf(format, args...)
	c.hpa.Status.Conditions = conds
}

func (c *Controller) removeCondition(typ autoscalingv2.HorizontalPodAutoscalerConditionType) {
	kept := c.hpa.Status.Conditions[:0]
	for _, cond := range c.hpa.Status.Conditions {
		if cond.Type != typ {
			kept = append(kept, cond)
		}
	}
	c.hpa.Status.Conditions = kept
}

func (c *Controller) conditionTrue(typ autoscalingv2.HorizontalPodAutoscalerConditionType) bool {
	for _, cond := range c.hpa.Status.Conditions {
		if cond.Type == typ {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
