package hpa

import (
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
)

// The controller's scale-up limit without spec.behavior (horizontal.go:
// scaleUpLimitFactor, scaleUpLimitMinimum): at most max(2 × current, 4).
const (
	scaleUpLimitFactor  = 2.0
	scaleUpLimitMinimum = 4.0
)

// normalize mirrors horizontal.go: (*HorizontalController).normalizeDesiredReplicas,
// the rules of an HPA without spec.behavior: the highest recommendation within
// the downscale stabilization window, then [minReplicas, min(maxReplicas,
// max(2 × current, 4))].
func (c *Controller) normalize(now time.Time, current, proposal, minReplicas int32) int32 {
	stabilized := c.stabilize(now, proposal)
	if stabilized != proposal {
		c.setCondition(now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation")
	} else {
		c.setCondition(now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size")
	}
	desired, reason, message := convertWithRules(current, stabilized, minReplicas, c.hpa.Spec.MaxReplicas)
	status := corev1.ConditionTrue
	if desired == stabilized {
		status = corev1.ConditionFalse
	}
	c.setCondition(now, autoscalingv2.ScalingLimited, status, reason, "%s", message)
	return desired
}

// stabilize mirrors horizontal.go: (*HorizontalController).stabilizeRecommendation:
// the maximum of proposal and the recommendations younger than the downscale
// window; the proposal replaces one recommendation older than the window, or is
// appended.
func (c *Controller) stabilize(now time.Time, proposal int32) int32 {
	highest := proposal
	cutoff := now.Add(-c.opts.DownscaleStabilizationWindow)
	old := -1
	for i, r := range c.recommendations {
		if r.at.Before(cutoff) {
			old = i
		} else if r.replicas > highest {
			highest = r.replicas
		}
	}
	if old >= 0 {
		c.recommendations[old] = timedRecommendation{proposal, now}
	} else {
		c.recommendations = append(c.recommendations, timedRecommendation{proposal, now})
	}
	return highest
}

// convertWithRules mirrors horizontal.go: convertDesiredReplicasWithRules.
func convertWithRules(current, desired, minReplicas, maxReplicas int32) (int32, string, string) {
	limit := int32(math.Max(scaleUpLimitFactor*float64(current), scaleUpLimitMinimum))
	maximum, reason, message := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
	if maxReplicas > limit {
		maximum, reason, message = limit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
	}
	switch {
	case desired < minReplicas:
		return minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
	case desired > maximum:
		return maximum, reason, message
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// normalizeWithBehaviors mirrors horizontal.go:
// (*HorizontalController).normalizeDesiredReplicasWithBehaviors: stabilize over
// both windows, then apply the scaling policies and [minReplicas, maxReplicas].
func (c *Controller) normalizeWithBehaviors(now time.Time, current, proposal, minReplicas int32) int32 {
	b := c.hpa.Spec.Behavior
	downWindow := int32(c.opts.DownscaleStabilizationWindow / time.Second) // maybeInitScaleDownStabilizationWindow
	if b.ScaleDown.StabilizationWindowSeconds != nil {
		downWindow = *b.ScaleDown.StabilizationWindowSeconds
	}
	stabilized, reason, message := c.stabilizeWithBehaviors(now, current, proposal, *b.ScaleUp.StabilizationWindowSeconds, downWindow)
	if stabilized != proposal {
		c.setCondition(now, autoscalingv2.AbleToScale, corev1.ConditionTrue, reason, "%s", message)
	} else {
		c.setCondition(now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size")
	}
	desired, reason, message := c.convertWithBehaviorRate(now, current, stabilized, minReplicas)
	status := corev1.ConditionTrue
	if desired == stabilized {
		status = corev1.ConditionFalse
	}
	c.setCondition(now, autoscalingv2.ScalingLimited, status, reason, "%s", message)
	return desired
}

// stabilizeWithBehaviors mirrors horizontal.go:
// (*HorizontalController).stabilizeRecommendationWithBehaviors: a scale-up goes no
// higher than the lowest recommendation of the scale-up window, a scale-down no
// lower than the highest of the scale-down window (both include the proposal).
// The proposal replaces a recommendation older than both windows, or is appended.
func (c *Controller) stabilizeWithBehaviors(now time.Time, current, proposal, upSeconds, downSeconds int32) (int32, string, string) {
	up, down := proposal, proposal
	upCutoff := now.Add(-time.Duration(upSeconds) * time.Second)
	downCutoff := now.Add(-time.Duration(downSeconds) * time.Second)
	old := -1
	for i, r := range c.recommendations {
		if r.at.After(upCutoff) {
			up = min(up, r.replicas)
		}
		if r.at.After(downCutoff) {
			down = max(down, r.replicas)
		}
		if r.at.Before(upCutoff) && r.at.Before(downCutoff) {
			old = i
		}
	}
	recommendation := current
	if recommendation < up {
		recommendation = up
	}
	if recommendation > down {
		recommendation = down
	}
	if old >= 0 {
		c.recommendations[old] = timedRecommendation{proposal, now}
	} else {
		c.recommendations = append(c.recommendations, timedRecommendation{proposal, now})
	}
	if proposal >= current {
		return recommendation, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return recommendation, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// convertWithBehaviorRate mirrors horizontal.go:
// (*HorizontalController).convertDesiredReplicasWithBehaviorRate: the scale-up
// (scale-down) limit of the policies, never below (above) the current count, then
// maxReplicas (minReplicas).
func (c *Controller) convertWithBehaviorRate(now time.Time, current, desired, minReplicas int32) (int32, string, string) {
	b := c.hpa.Spec.Behavior
	switch {
	case desired > current:
		limit := scaleUpLimit(now, current, c.scaleUps, c.scaleDowns, b.ScaleUp)
		if limit < current {
			limit = current
		}
		maximum, reason, message := c.hpa.Spec.MaxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
		if maximum > limit {
			maximum, reason, message = limit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
		}
		if desired > maximum {
			return maximum, reason, message
		}
	case desired < current:
		limit := scaleDownLimit(now, current, c.scaleUps, c.scaleDowns, b.ScaleDown)
		if limit > current {
			limit = current
		}
		minimum, reason, message := minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
		if minimum < limit {
			minimum, reason, message = limit, "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
		}
		if desired < minimum {
			return minimum, reason, message
		}
	}
	return desired, "DesiredWithinRange", "the desired count is within the acceptable range"
}

// changeInPeriod mirrors horizontal.go: getReplicasChangePerPeriod: the replicas
// added (or removed) by the events younger than the period.
func changeInPeriod(now time.Time, periodSeconds int32, events []scaleEvent) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var n int32
	for _, e := range events {
		if e.at.After(cutoff) {
			n += e.change
		}
	}
	return n
}

// scaleUpLimit mirrors horizontal.go: calculateScaleUpLimitWithScalingRules: per
// policy, the replicas at the start of its period plus its allowance (Pods: +value;
// Percent: × (1 + value/100), rounded up); Max takes the largest, Min the
// smallest; Disabled allows no change.
func scaleUpLimit(now time.Time, current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	minPolicy := *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect
	result := int32(math.MinInt32)
	if minPolicy {
		result = math.MaxInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(now, p.PeriodSeconds, ups) + changeInPeriod(now, p.PeriodSeconds, downs)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start + p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		if minPolicy {
			result = min(result, proposed)
		} else {
			result = max(result, proposed)
		}
	}
	return result
}

// scaleDownLimit mirrors horizontal.go: calculateScaleDownLimitWithBehaviors: per
// policy, the replicas at the start of its period minus its allowance (Pods:
// -value; Percent: × (1 - value/100), rounded down); Max takes the lowest (the
// largest change), Min the highest; Disabled allows no change.
func scaleDownLimit(now time.Time, current int32, ups, downs []scaleEvent, rules *autoscalingv2.HPAScalingRules) int32 {
	if *rules.SelectPolicy == autoscalingv2.DisabledPolicySelect {
		return current
	}
	minPolicy := *rules.SelectPolicy == autoscalingv2.MinChangePolicySelect
	result := int32(math.MaxInt32)
	if minPolicy {
		result = math.MinInt32
	}
	for _, p := range rules.Policies {
		start := current - changeInPeriod(now, p.PeriodSeconds, ups) + changeInPeriod(now, p.PeriodSeconds, downs)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start - p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		if minPolicy {
			result = max(result, proposed)
		} else {
			result = min(result, proposed)
		}
	}
	return result
}

// storeScaleEvent mirrors horizontal.go: (*HorizontalController).storeScaleEvent:
// with spec.behavior, the change is recorded in the scale-up or scale-down history,
// reusing a slot older than the direction's longest policy period.
func (c *Controller) storeScaleEvent(now time.Time, prev, next int32) {
	b := c.hpa.Spec.Behavior
	if b == nil {
		return
	}
	events, rules, change := &c.scaleDowns, b.ScaleDown, prev-next
	if next > prev {
		events, rules, change = &c.scaleUps, b.ScaleUp, next-prev
	}
	var longest int32
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	cutoff := now.Add(-time.Duration(longest) * time.Second)
	old := -1
	for i := range *events {
		if (*events)[i].at.Before(cutoff) {
			(*events)[i].outdated = true // markScaleEventsOutdated
		}
		if (*events)[i].outdated {
			old = i
		}
	}
	e := scaleEvent{change: change, at: now}
	if old >= 0 {
		(*events)[old] = e
	} else {
		*events = append(*events, e)
	}
}
