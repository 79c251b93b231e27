package app

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// DefaultMaxSelectorBytes is the default of --max-selector-bytes: the longest
// label or field selector a request may carry, 4 KiB, the longest the adapter
// ever remembers (podselect.MaxSelectorBytes). An HPA's selector is a few
// labels (Kubernetes bounds a label key at 317 bytes and a value at 63), so
// 4 KiB holds dozens of them.
const DefaultMaxSelectorBytes = 4096

// selectorParams are the query parameters that carry selectors into an
// authorization decision: delegated authorization puts them in each
// SubjectAccessReview (k8s.io/apiserver AuthorizeWithSelectors), and its
// webhook authorizer caches each distinct review (an LRU of 8,192 entries):
// 3,000 distinct 90 KB selectors held 243 MB there (issue 20).
var selectorParams = []string{"labelSelector", "fieldSelector"}

// withSelectorLimit returns the server's handler chain behind a filter that
// refuses (400 Bad Request, a metav1.Status) a request whose label or field
// selector is longer than limit bytes, before anything else of the chain
// runs: authentication, authorization and its cache never see it, so what a
// tenant's requests can hold there is bounded by limit, not by what it sends.
// A query string that could not hold a selector of limit bytes (three times
// the limit plus room for the other parameters, as percent-encoding at most
// triples a byte) is refused without being parsed.
func withSelectorLimit(build func(http.Handler, *genericapiserver.Config) http.Handler, limit int, codecs runtime.NegotiatedSerializer) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		chain := build(apiHandler, c)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			msg := selectorTooLong(r.URL.RawQuery, limit)
			if msg == "" {
				msg = externalFieldSelector(r.URL)
			}
			if msg != "" {
				responsewriters.ErrorNegotiated(apierrors.NewBadRequest(msg), codecs, schema.GroupVersion{}, w, r)
				return
			}
			chain.ServeHTTP(w, r)
		})
	}
}

// externalFieldSelector says why an External metric request with a field
// selector is refused, "" when it has none: the external metrics API reads the
// label selector only (custom-metrics-apiserver's external_metrics storage),
// so fieldSelector=metadata.name=vllm-0 was answered with the whole pool's
// value, as if it were that pod's.
func externalFieldSelector(u *url.URL) string {
	// Every HPA request comes here: parse its query only when it can name one
	// (spelled out, or percent-encoded).
	if !strings.HasPrefix(u.Path, "/apis/external.metrics.k8s.io/") ||
		!strings.Contains(u.RawQuery, "fieldSelector") && !strings.Contains(u.RawQuery, "%") {
		return ""
	}
	q, _ := url.ParseQuery(u.RawQuery)
	if fs := q.Get("fieldSelector"); fs != "" {
		return fmt.Sprintf("an External metric is its pool's value and takes no field selector (got %q): select the pool with labelSelector, or ask custom.metrics.k8s.io for one pod's value", excerpt.String(fs, 80))
	}
	return ""
}

// selectorTooLong says why a raw query string is refused, "" when it is not.
func selectorTooLong(rawQuery string, limit int) string {
	if len(rawQuery) <= limit {
		return "" // no selector in it can be longer
	}
	if len(rawQuery) > 3*limit+1024 {
		return fmt.Sprintf("the query string is %d bytes long: a label selector may be at most %d bytes (--max-selector-bytes)", len(rawQuery), limit)
	}
	// The values of every well-formed pair, as url.URL.Query (which the
	// chain's parameter decoding reads) keeps them beside a malformed one
	// ("&%zz", "a=b;c"): a malformed pair must not let a long selector by.
	q, _ := url.ParseQuery(rawQuery)
	for _, p := range selectorParams {
		for _, v := range q[p] {
			if len(v) > limit {
				return fmt.Sprintf("the %s is %d bytes long, more than %d (--max-selector-bytes)", p, len(v), limit)
			}
		}
	}
	return ""
}
