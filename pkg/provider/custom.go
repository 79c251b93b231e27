package provider

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/pkg/discovery"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

var _ cmprovider.CustomMetricsProvider = (*Provider)(nil)

var podsResource = schema.GroupResource{Resource: "pods"}

// PodCatalog returns the per-pod metrics served on custom.metrics.k8s.io for the
// resource "pods": the pod's own saturation and signals, for an HPA metric of type
// Pods (e.g. llm_saturation with target averageValue "1").
func PodCatalog() []string {
	return []string{MetricSaturation, MetricQueueDepth, MetricRunning, MetricKVCacheUsage}
}

// ListAllMetrics lists the per-pod metrics.
func (p *Provider) ListAllMetrics() []cmprovider.CustomMetricInfo {
	var out []cmprovider.CustomMetricInfo
	for _, m := range PodCatalog() {
		out = append(out, cmprovider.CustomMetricInfo{GroupResource: podsResource, Namespaced: true, Metric: m})
	}
	return out
}

// GetMetricByName returns one pod's value. Errors: 404 for another resource, an
// unknown metric or pod; 503 when the pod is not Ready or has no fresh reading.
func (p *Provider) GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	metric, err := podMetric(info)
	if err != nil {
		return nil, err
	}
	list, err := p.podValues(ctx, metric, name.Namespace, labels.Everything(), name.Name)
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
	metric, err := podMetric(info)
	if err != nil {
		return nil, err
	}
	return p.podValues(ctx, metric, namespace, selector, "")
}

func podMetric(info cmprovider.CustomMetricInfo) (string, error) {
	name := strings.ToLower(info.Metric)
	if info.GroupResource != podsResource || !slices.Contains(PodCatalog(), name) {
		return "", cmprovider.NewMetricNotFoundError(info.GroupResource, info.Metric)
	}
	return name, nil
}

// podValues lists the per-pod values of metric; onlyPod, when set, restricts the
// answer to that pod.
func (p *Provider) podValues(ctx context.Context, metric, namespace string, selector labels.Selector, onlyPod string) (*custom_metrics.MetricValueList, error) {
	where := fmt.Sprintf("pods/%s in namespace %q for selector %q", metric, namespace, selector)
	if onlyPod != "" {
		where = fmt.Sprintf("pods/%s of pod %s/%s", metric, namespace, onlyPod)
	}
	if namespace == "" {
		return nil, apierrors.NewBadRequest(where + ": a namespace is required")
	}
	// A by-name request names one pod; its selector would be "everything" and put
	// the whole namespace in the scrape set, so it declares no interest and the pod
	// is scraped on demand.
	if onlyPod == "" {
		p.pods.Touch(namespace, selector)
	}
	pods, err := p.pods.Pods(namespace, selector)
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s: %v", where, err))
	}
	if onlyPod != "" {
		pods = slices.DeleteFunc(slices.Clone(pods), func(pod *corev1.Pod) bool { return pod.Name != onlyPod })
	}
	if len(pods) == 0 {
		return nil, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, where+": no pods match")
	}
	counted := slices.DeleteFunc(slices.Clone(pods), func(pod *corev1.Pod) bool { return !discovery.Counted(pod) })
	if len(counted) == 0 {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s: %d pods match but none is Running and Ready", where, len(pods)))
	}
	p.scrapeCold(ctx, counted)
	now := p.clock.Now()
	list := &custom_metrics.MetricValueList{}
	var missing []string
	for _, pod := range counted {
		res, why, ok := p.fresh(pod, now)
		if !ok {
			missing = append(missing, pod.Name+": "+why)
			continue
		}
		v := podValue(metric, res)
		if v == nil {
			missing = append(missing, pod.Name+": does not expose this signal")
			continue
		}
		q, err := MilliQuantity(*v)
		if err != nil {
			missing = append(missing, pod.Name+": "+err.Error())
			continue
		}
		list.Items = append(list.Items, custom_metrics.MetricValue{
			DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name},
			Metric:          custom_metrics.MetricIdentifier{Name: metric},
			Timestamp:       metav1.NewTime(res.Time),
			Value:           q,
		})
	}
	if len(list.Items) == 0 {
		slices.Sort(missing)
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("%s: %d Ready pods match, none has fresh data: %s", where, len(counted), summarize(missing)))
	}
	return list, nil
}

// podValue returns one pod's value of a per-pod metric, nil when absent.
func podValue(metric string, res *scrape.Result) *float64 {
	switch metric {
	case MetricSaturation:
		return res.Fusion.Saturation
	case MetricQueueDepth:
		return res.Reading.QueueDepth
	case MetricRunning:
		return res.Reading.Running
	case MetricKVCacheUsage:
		return res.Reading.KVCacheUsage
	}
	return nil
}
