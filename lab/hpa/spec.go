package hpa

import (
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// DefaultCPUUtilization is the target the API server gives an HPA without metrics:
// 80 % CPU utilization (k8s.io/kubernetes v1.37.2, pkg/apis/autoscaling:
// DefaultCPUUtilization).
const DefaultCPUUtilization = 80

// Limits of the API validation (pkg/apis/autoscaling/validation/validation.go:
// MaxPeriodSeconds, MaxStabilizationWindowSeconds).
const (
	// MaxPeriodSeconds is the longest scaling policy period.
	MaxPeriodSeconds = 1800
	// MaxStabilizationWindowSeconds is the longest stabilization window.
	MaxStabilizationWindowSeconds = 3600
)

// Parse decodes one HorizontalPodAutoscaler from YAML or JSON (apiVersion
// autoscaling/v2), applies the API server's defaults ([SetDefaults]) and
// validates it ([Validate], with scale to zero allowed as in 1.37). Unknown fields
// are errors, so a misspelt field is not silently ignored.
func Parse(data []byte) (*autoscalingv2.HorizontalPodAutoscaler, error) {
	var h autoscalingv2.HorizontalPodAutoscaler
	if err := yaml.UnmarshalStrict(data, &h); err != nil {
		return nil, fmt.Errorf("decoding HorizontalPodAutoscaler: %w", err)
	}
	if h.APIVersion != "autoscaling/v2" || h.Kind != "HorizontalPodAutoscaler" {
		return nil, fmt.Errorf("want apiVersion autoscaling/v2 and kind HorizontalPodAutoscaler, got apiVersion %q kind %q", h.APIVersion, h.Kind)
	}
	SetDefaults(&h)
	if err := Validate(&h, true); err != nil {
		return nil, err
	}
	return &h, nil
}

// SetDefaults fills h as the API server's defaulting does
// (pkg/apis/autoscaling/v2/defaults.go: SetDefaults_HorizontalPodAutoscaler and
// SetDefaults_HorizontalPodAutoscalerBehavior): minReplicas 1; without metrics,
// 80 % CPU utilization; and, only when spec.behavior is set, every unset field of
// both rules: scale-up stabilization 0 s, selectPolicy Max, policies
// {Pods 4 per 15 s, Percent 100 per 15 s}; scale-down selectPolicy Max, policies
// {Percent 100 per 15 s} and no stabilization window (the controller then uses its
// --horizontal-pod-autoscaler-downscale-stabilization). A nil behavior stays nil:
// the controller then uses its older rules (see [Controller]).
func SetDefaults(h *autoscalingv2.HorizontalPodAutoscaler) {
	if h.Spec.MinReplicas == nil {
		one := int32(1)
		h.Spec.MinReplicas = &one
	}
	if len(h.Spec.Metrics) == 0 {
		u := int32(DefaultCPUUtilization)
		h.Spec.Metrics = []autoscalingv2.MetricSpec{{
			Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricSource{
				Name:   corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &u},
			},
		}}
	}
	if h.Spec.Behavior == nil {
		return
	}
	h.Spec.Behavior.ScaleUp = fillRules(h.Spec.Behavior.ScaleUp, defaultScaleUpRules())
	h.Spec.Behavior.ScaleDown = fillRules(h.Spec.Behavior.ScaleDown, defaultScaleDownRules())
}

// defaultScaleUpRules are the scale-up rules of the v2 defaults: the controller's
// pre-behavior limit (double or +4 pods) expressed as policies.
func defaultScaleUpRules() *autoscalingv2.HPAScalingRules {
	zero := int32(0)
	maxPolicy := autoscalingv2.MaxChangePolicySelect
	return &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: &zero,
		SelectPolicy:               &maxPolicy,
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
}

// defaultScaleDownRules are the scale-down rules of the v2 defaults; the window is
// left nil for the controller's command-line default.
func defaultScaleDownRules() *autoscalingv2.HPAScalingRules {
	maxPolicy := autoscalingv2.MaxChangePolicySelect
	return &autoscalingv2.HPAScalingRules{
		SelectPolicy: &maxPolicy,
		Policies:     []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
	}
}

// fillRules copies the set fields of from over def (defaults.go: copyHPAScalingRules).
func fillRules(from, def *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if from == nil {
		return def
	}
	if from.SelectPolicy != nil {
		def.SelectPolicy = from.SelectPolicy
	}
	if from.StabilizationWindowSeconds != nil {
		def.StabilizationWindowSeconds = from.StabilizationWindowSeconds
	}
	if from.Policies != nil {
		def.Policies = from.Policies
	}
	if from.Tolerance != nil {
		def.Tolerance = from.Tolerance
	}
	return def
}

// Validate checks h's spec as the API server does
// (pkg/apis/autoscaling/validation/validation.go: validateHorizontalPodAutoscalerSpec
// and the functions it calls) for the fields the controller reads, and reports every
// problem at once. scaleToZero is the HPAScaleToZero feature gate: it lowers the
// bound of minReplicas from 1 to 0 (pkg/registry/autoscaling/horizontalpodautoscaler:
// MinReplicasLowerBound).
func Validate(h *autoscalingv2.HorizontalPodAutoscaler, scaleToZero bool) error {
	spec := h.Spec
	p := field.NewPath("spec")
	var errs field.ErrorList
	lower := int32(1)
	if scaleToZero {
		lower = 0
	}
	if spec.MinReplicas != nil && *spec.MinReplicas < lower {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), *spec.MinReplicas, fmt.Sprintf("must be greater than or equal to %d", lower)))
	}
	if spec.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), spec.MaxReplicas, "must be greater than or equal to 1"))
	}
	if spec.MinReplicas != nil && spec.MaxReplicas < *spec.MinReplicas {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), spec.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	objectOrExternal := false
	for i, m := range spec.Metrics {
		errs = append(errs, validateMetric(m, p.Child("metrics").Index(i))...)
		if m.Type == autoscalingv2.ObjectMetricSourceType || m.Type == autoscalingv2.ExternalMetricSourceType {
			objectOrExternal = true
		}
	}
	if spec.MinReplicas != nil && *spec.MinReplicas == 0 && !objectOrExternal {
		errs = append(errs, field.Forbidden(p.Child("metrics"), "must specify at least one Object or External metric to support scaling to zero replicas"))
	}
	if b := spec.Behavior; b != nil {
		errs = append(errs, validateRules(b.ScaleUp, p.Child("behavior", "scaleUp"))...)
		errs = append(errs, validateRules(b.ScaleDown, p.Child("behavior", "scaleDown"))...)
	}
	return errs.ToAggregate()
}

// validateMetric mirrors validation.go: validateMetricSpec: exactly the source of
// the metric's type is set, and it is valid (validate*Source).
func validateMetric(m autoscalingv2.MetricSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	present := 0
	for _, set := range []bool{m.Object != nil, m.Pods != nil, m.Resource != nil, m.ContainerResource != nil, m.External != nil} {
		if set {
			present++
		}
	}
	if present > 1 {
		errs = append(errs, field.Forbidden(p, "must populate the given metric source only"))
	}
	missing := func(child string) field.ErrorList {
		return append(errs, field.Required(p.Child(child), "must populate information for the given metric source"))
	}
	switch m.Type {
	case autoscalingv2.ObjectMetricSourceType:
		if m.Object == nil {
			return missing("object")
		}
		return append(errs, validateObjectSource(m.Object, p.Child("object"))...)
	case autoscalingv2.PodsMetricSourceType:
		if m.Pods == nil {
			return missing("pods")
		}
		return append(errs, validatePodsSource(m.Pods, p.Child("pods"))...)
	case autoscalingv2.ResourceMetricSourceType:
		if m.Resource == nil {
			return missing("resource")
		}
		return append(errs, validateResourceSource(m.Resource, p.Child("resource"))...)
	case autoscalingv2.ContainerResourceMetricSourceType:
		if m.ContainerResource == nil {
			return missing("containerResource")
		}
		return append(errs, validateContainerResourceSource(m.ContainerResource, p.Child("containerResource"))...)
	case autoscalingv2.ExternalMetricSourceType:
		if m.External == nil {
			return missing("external")
		}
		return append(errs, validateExternalSource(m.External, p.Child("external"))...)
	}
	return append(errs, field.NotSupported(p.Child("type"), m.Type, []string{
		string(autoscalingv2.ContainerResourceMetricSourceType), string(autoscalingv2.ExternalMetricSourceType),
		string(autoscalingv2.ObjectMetricSourceType), string(autoscalingv2.PodsMetricSourceType),
		string(autoscalingv2.ResourceMetricSourceType),
	}))
}

// validateMetricName reports an empty metric name (at p.metric.name).
func validateMetricName(name string, p *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p.Child("metric", "name"), "must specify a metric name")}
	}
	return nil
}

// validateObjectSource mirrors validation.go: validateObjectSource.
func validateObjectSource(s *autoscalingv2.ObjectMetricSource, p *field.Path) field.ErrorList {
	errs := validateMetricName(s.Metric.Name, p)
	errs = append(errs, validateTarget(s.Target, p.Child("target"))...)
	if s.Target.Value == nil && s.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return errs
}

// validatePodsSource mirrors validation.go: validatePodsSource.
func validatePodsSource(s *autoscalingv2.PodsMetricSource, p *field.Path) field.ErrorList {
	errs := validateMetricName(s.Metric.Name, p)
	errs = append(errs, validateTarget(s.Target, p.Child("target"))...)
	if s.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must specify a positive target averageValue"))
	}
	return errs
}

// validateResourceSource mirrors validation.go: validateResourceSource.
func validateResourceSource(s *autoscalingv2.ResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	}
	return append(errs, validateResourceTarget(s.Target, p.Child("target"))...)
}

// validateContainerResourceSource mirrors validation.go:
// validateContainerResourceSource.
func validateContainerResourceSource(s *autoscalingv2.ContainerResourceMetricSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "must specify a resource name"))
	}
	if s.Container == "" {
		errs = append(errs, field.Required(p.Child("container"), "must specify a container"))
	}
	return append(errs, validateResourceTarget(s.Target, p.Child("target"))...)
}

// validateExternalSource mirrors validation.go: validateExternalSource.
func validateExternalSource(s *autoscalingv2.ExternalMetricSource, p *field.Path) field.ErrorList {
	errs := validateMetricName(s.Metric.Name, p)
	errs = append(errs, validateTarget(s.Target, p.Child("target"))...)
	t := s.Target
	if t.Value == nil && t.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value for metric or a per-pod target"))
	}
	if t.Value != nil && t.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("target", "value"), "may not set both a target value for metric and a per-pod target"))
	}
	return errs
}

// validateResourceTarget is the target check that validateResourceSource and
// validateContainerResourceSource share: a valid target with exactly one of
// averageUtilization and averageValue.
func validateResourceTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	errs := validateTarget(t, p)
	if t.AverageUtilization == nil && t.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("averageUtilization"), "must set either a target raw value or a target utilization"))
	}
	if t.AverageUtilization != nil && t.AverageValue != nil {
		errs = append(errs, field.Forbidden(p.Child("averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

// validateTarget mirrors validation.go: validateMetricTarget.
func validateTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch t.Type {
	case autoscalingv2.UtilizationMetricType, autoscalingv2.ValueMetricType, autoscalingv2.AverageValueMetricType:
	case "":
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric target type"))
	default:
		errs = append(errs, field.Invalid(p.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("value"), t.Value.String(), "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("averageValue"), t.AverageValue.String(), "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		errs = append(errs, field.Invalid(p.Child("averageUtilization"), *t.AverageUtilization, "must be greater than 0"))
	}
	return errs
}

// validateRules mirrors validation.go: validateScalingRules and validateScalingPolicy.
func validateRules(r *autoscalingv2.HPAScalingRules, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil && (*w < 0 || *w > MaxStabilizationWindowSeconds) {
		errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), *w, fmt.Sprintf("must be between 0 and %d", MaxStabilizationWindowSeconds)))
	}
	if s := r.SelectPolicy; s != nil {
		switch *s {
		case autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect, autoscalingv2.DisabledPolicySelect:
		default:
			errs = append(errs, field.NotSupported(p.Child("selectPolicy"), *s, []string{"Disabled", "Max", "Min"}))
		}
	}
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(p.Child("policies"), "must specify at least one Policy"))
	}
	for i, pol := range r.Policies {
		q := p.Child("policies").Index(i)
		if pol.Type != autoscalingv2.PodsScalingPolicy && pol.Type != autoscalingv2.PercentScalingPolicy {
			errs = append(errs, field.NotSupported(q.Child("type"), pol.Type, []string{"Percent", "Pods"}))
		}
		if pol.Value <= 0 {
			errs = append(errs, field.Invalid(q.Child("value"), pol.Value, "must be greater than zero"))
		}
		if pol.PeriodSeconds <= 0 || pol.PeriodSeconds > MaxPeriodSeconds {
			errs = append(errs, field.Invalid(q.Child("periodSeconds"), pol.PeriodSeconds, fmt.Sprintf("must be between 1 and %d", MaxPeriodSeconds)))
		}
	}
	if r.Tolerance != nil && r.Tolerance.Sign() < 0 {
		errs = append(errs, field.Invalid(p.Child("tolerance"), r.Tolerance.String(), "must be greater than or equal to 0"))
	}
	return errs
}
