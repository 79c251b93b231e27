package provider

import (
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// MaxMessageBytes bounds the message of every API status the provider
// returns, and so the adapter's part of an HPA condition: whatever the request
// (a 100 KB selector, a long metric name) and the pods (thousands failing,
// long warnings) hold. An HPA whose condition message is too large cannot
// have its status written at all.
const MaxMessageBytes = 1024

// The parts of a message that come from outside, each cut to a bound so that
// the whole stays within MaxMessageBytes with room for the fixed text.
const (
	namespaceExcerptBytes = 64  // a namespace name is at most 63 bytes
	selectorExcerptBytes  = 256 // a request's label selector, canonical form
	metricExcerptBytes    = 64  // a metric name the catalog does not have
	nameExcerptBytes      = 253 // a pod name (a DNS subdomain) from a request path
	reasonExcerptBytes    = 400 // one "pod: why" in a list (a pod name is at most 253 bytes)
	warningExcerptBytes   = 120 // one of an engine's warnings (it quotes label values)
	reasonsBudgetBytes    = 540 // the list of pods and reasons in one message
	detailExcerptBytes    = 200 // an error of a lower layer (the pod cache)
)

// describePool names a pool request in messages: the metric, the namespace and the
// selector, the last two cut to excerpts.
func describePool(metric, namespace string, selector labels.Selector) string {
	return fmt.Sprintf("%s in namespace %q for selector %q", metric,
		excerpt.String(namespace, namespaceExcerptBytes), excerpt.String(selector.String(), selectorExcerptBytes))
}

// describePod names a by-name request in messages.
func describePod(metric string, pod, namespace string) string {
	return fmt.Sprintf("pods/%s of pod %s/%s", metric, excerpt.String(namespace, namespaceExcerptBytes), excerpt.String(pod, nameExcerptBytes))
}

// unavailable is a 503: pods match but give no value, or the adapter cannot
// answer yet. The HPA holds its replica count.
func unavailable(msg string) *apierrors.StatusError {
	return newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, msg)
}

// badRequest is a 400.
func badRequest(msg string) *apierrors.StatusError {
	return newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, msg)
}

// metricNotFound is custom-metrics-apiserver's 404 for a metric not served,
// naming at most an excerpt of the requested name.
func metricNotFound(gr schema.GroupResource, metric string) error {
	metric = excerpt.String(metric, metricExcerptBytes)
	gr.Resource = excerpt.String(gr.Resource, metricExcerptBytes)
	return cmprovider.NewMetricNotFoundError(gr, metric)
}

// lowerError renders an error of a lower layer (the pod cache) for a message.
func lowerError(err error) string {
	return excerpt.String(err.Error(), detailExcerptBytes)
}

// outOfRange is the 503 of a value that cannot be served (above what milli
// units hold in an int64, or not finite): a clear message the HPA shows,
// rather than a 500 "internal error".
func outOfRange(where string, err error) *apierrors.StatusError {
	return unavailable(fmt.Sprintf("%s: the value is out of range (%v); check the engines' metrics and the set points", where, err))
}

// capMessage cuts a message to MaxMessageBytes at a rune boundary.
func capMessage(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	return excerpt.String(msg, MaxMessageBytes)
}

// joinReasons joins "pod: why" reasons, each cut to an excerpt, while they
// fit in reasonsBudgetBytes and at most show of them, then counts the rest.
func joinReasons(reasons []string, show int) string {
	var b strings.Builder
	shown := 0
	for _, r := range reasons {
		r = excerpt.String(r, reasonExcerptBytes)
		if shown == show || (shown > 0 && b.Len()+2+len(r) > reasonsBudgetBytes) {
			break
		}
		if shown > 0 {
			b.WriteString("; ")
		}
		b.WriteString(r)
		shown++
	}
	if rest := len(reasons) - shown; rest > 0 {
		fmt.Fprintf(&b, "; and %d more", rest)
	}
	return b.String()
}
