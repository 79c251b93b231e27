package provider

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
)

var _ cmprovider.CustomMetricsProvider = (*Provider)(nil)

var podsResource = schema.GroupResource{Resource: "pods"}

// ListAllMetrics lists the per-pod metrics served on custom.metrics.k8s.io for
// the resource "pods": every catalog policy with a value per pod (the pod's own
// saturation and raw signals), for an HPA metric of type Pods (e.g.
// llm_saturation with target averageValue "1").
func (p *Provider) ListAllMetrics() []cmprovider.CustomMetricInfo {
	var out []cmprovider.CustomMetricInfo
	for _, m := range p.catalogs.Catalog().PerPodNames() {
		out = append(out, cmprovider.CustomMetricInfo{GroupResource: podsResource, Namespaced: true, Metric: m})
	}
	return out
}

// GetMetricByName returns one pod's value. Errors: 404 for another resource, an
// unknown metric or pod; 503 when the pod is not Ready or has no fresh reading.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	catalog, pol, err := p.podPolicy(info)
	if err != nil {
		return nil, err
	}
	where := describePod(pol.Name, name.Name, name.Namespace)
	members, err := p.member(where, name.Namespace, name.Name)
	if err != nil {
		p.fail(pol.Name, err)
		return nil, err
	}
	list, err := p.podValues(ctx, catalog, pol, where, members)
	if err != nil {
		return nil, err
	}
	return &list.Items[0], nil
}

// GetMetricBySelector returns one item per Running, Ready pod of namespace matched
// by selector that has a fresh reading with the signal. Pods without one are left
// out, so that the HPA applies its own rule for pods with missing metrics
// (assume 0 when scaling up, the target when scaling down). Errors as for the
// External metrics: 404 when no pod matches, 503 when no pod has data.
func (p *Provider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info cmprovider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	catalog, pol, err := p.podPolicy(info)
	if err != nil {
		return nil, err
	}
	where := "pods/" + describePool(pol.Name, namespace, selector)
	members, err := p.members(where, namespace, selector)
	if err != nil {
		p.fail(pol.Name, err)
		return nil, err
	}
	return p.podValues(ctx, catalog, pol, where, members)
}

func (p *Provider) podPolicy(info cmprovider.CustomMetricInfo) (*policy.Catalog, *policy.Policy, error) {
	catalog := p.catalogs.Catalog()
	pol := catalog.Lookup(info.Metric)
	if info.GroupResource != podsResource || pol == nil || !pol.PerPod() {
		p.metrics.request(metricUnknown, ResultNotFound)
		return nil, nil, metricNotFound(info.GroupResource, info.Metric)
	}
	return catalog, pol, nil
}

// podValues lists the per-pod values of policy over members: each pod's part
// in the pool, as policy.PoolBuilder computes it for the External answer.
func (p *Provider) podValues(ctx context.Context, catalog *policy.Catalog, pol *policy.Policy, where string, members []podselect.Member) (*custom_metrics.MetricValueList, error) {
	list := &custom_metrics.MetricValueList{}
	var missing []string
	a, err := p.evaluate(ctx, catalog, pol, where, members[0].Pod.Namespace, members, func(m *podselect.Member, v policy.PodValue) {
		if !v.Present {
			why := v.Why
			if why == "" {
				why = "does not expose this signal"
			}
			missing = append(missing, m.Pod.Name+": "+why)
			return
		}
		q, err := MilliQuantity(v.Value)
		if err != nil {
			missing = append(missing, m.Pod.Name+": "+err.Error())
			return
		}
		list.Items = append(list.Items, custom_metrics.MetricValue{
			DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: m.Pod.Namespace, Name: m.Pod.Name},
			Metric:          custom_metrics.MetricIdentifier{Name: pol.Name},
			Timestamp:       metav1.NewTime(v.Time),
			Value:           q,
		})
	}, false, nil)
	if err != nil {
		p.fail(pol.Name, err)
		return nil, err
	}
	switch {
	case a.pool.Pods == 0:
		err = unavailable(fmt.Sprintf("%s: %d pods match but none is Running and Ready", where, a.matched))
	case len(list.Items) == 0:
		slices.Sort(missing)
		err = unavailable(fmt.Sprintf("%s: %d Ready pods match, none has fresh data: %s", where, a.pool.Pods, summarize(missing)))
	}
	if err != nil {
		p.fail(pol.Name, err)
		return nil, err
	}
	p.metrics.request(pol.Name, ResultOK)
	return list, nil
}
