package apiservice

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultCheckInterval is how often Run re-reads the APIServices: often enough
// that a takeover by another product (a KEDA or prometheus-adapter install or
// upgrade re-applies its APIService) shows within a minute, one GET per
// APIService per replica each time.
const DefaultCheckInterval = time.Minute

// State says who serves an APIService.
type State string

// The states of an APIService, from the adapter's point of view.
const (
	// StateOwned: spec.service is the adapter's Service.
	StateOwned State = "owned"
	// StateOtherService: spec.service is another Service (KEDA's
	// keda/keda-metrics-apiserver, prometheus-adapter, ...).
	StateOtherService State = "other-service"
	// StateLocal: no spec.service; kube-apiserver serves the group itself.
	StateLocal State = "local"
	// StateMissing: the APIService does not exist; nothing serves the group
	// through the aggregator.
	StateMissing State = "missing"
	// StateUnknown: it could not be read (RBAC, API server unreachable);
	// Message says why.
	StateUnknown State = "unknown"
)

// Result is the outcome of one check of one APIService.
type Result struct {
	// APIService is the APIService's name.
	APIService string `json:"apiService"`
	State      State  `json:"state"`
	// ServedBy is the Service it routes to, "namespace/name"; empty unless
	// State is owned or other-service.
	ServedBy string `json:"servedBy,omitempty"`
	// Product guesses the product behind another Service from its name
	// ("KEDA", "prometheus-adapter", ...); empty when unknown.
	Product string `json:"product,omitempty"`
	// Available is the status of the APIService's Available condition ("True",
	// "False", "Unknown"), as the aggregator last set it; empty when absent.
	Available string `json:"available,omitempty"`
	// Message is the Available condition's message, or the read error.
	Message string `json:"message,omitempty"`
	// CheckedAt is when the APIService was read.
	CheckedAt time.Time `json:"checkedAt"`
}

// Checker watches whether the adapter serves its APIServices. Only one
// Service can own an APIService in a cluster, and KEDA and prometheus-adapter
// (external rules) claim v1beta1.external.metrics.k8s.io too; when another one
// owns it, every HPA External metric goes there and the adapter serves nobody,
// while looking healthy.
//
// Each Check logs a transition (error level when an APIService is missing or
// served by someone else, naming the owner), sets the gauge
// saturation_adapter_apiservice_owned{apiservice} to 1 or 0, and keeps the
// Results for Status and ServeHTTP.
//
// It offers no readiness check on purpose: an adapter that does not own its
// APIService is still healthy, and failing readiness for it would stall its own
// rollout (maxUnavailable 0) and break the migration order "adapter Ready
// first, then move the APIService to it" (otherwise the moved APIService points
// at no ready endpoint: discovery fails cluster-wide and namespace deletion
// hangs, hazard NC-11). Safe for concurrent use.
type Checker struct {
	client dynamic.NamespaceableResourceInterface
	names  []string
	self   Service
	clock  clock.WithTicker
	owned  *prometheus.GaugeVec

	mu      sync.Mutex
	results map[string]Result
}

// NewChecker returns a Checker for the named APIServices, which should route
// to self. It registers saturation_adapter_apiservice_owned on reg and fails
// when that is already registered there.
func NewChecker(client dynamic.Interface, names []string, self Service, clk clock.WithTicker, reg prometheus.Registerer) (*Checker, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("no APIService to check")
	}
	if self.Namespace == "" || self.Name == "" {
		return nil, fmt.Errorf("the adapter's Service %q is incomplete: set --adapter-namespace and --adapter-service", self.String())
	}
	owned := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "saturation_adapter", Name: "apiservice_owned",
		Help: "1 when the APIService routes to this adapter's Service, 0 when it is missing, local or routes to another service.",
	}, []string{"apiservice"})
	if err := reg.Register(owned); err != nil {
		return nil, fmt.Errorf("registering saturation_adapter_apiservice_owned: %w", err)
	}
	return &Checker{client: client.Resource(Resource), names: slices.Clone(names), self: self, clock: clk,
		owned: owned, results: map[string]Result{}}, nil
}

// Run checks at once, then every interval, until ctx is done.
func (c *Checker) Run(ctx context.Context, interval time.Duration) {
	t := c.clock.NewTicker(interval)
	defer t.Stop()
	for {
		c.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Check reads each APIService once and returns the results in the order of
// the names given to NewChecker.
func (c *Checker) Check(ctx context.Context) []Result {
	out := make([]Result, 0, len(c.names))
	for _, name := range c.names {
		r := c.read(ctx, name)
		c.record(r)
		out = append(out, r)
	}
	return out
}

func (c *Checker) read(ctx context.Context, name string) Result {
	r := Result{APIService: name, CheckedAt: c.clock.Now()}
	u, err := c.client.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.State = StateMissing
		return r
	case err != nil:
		r.State, r.Message = StateUnknown, err.Error()
		return r
	}
	o, err := decode(u)
	if err != nil {
		r.State, r.Message = StateUnknown, err.Error()
		return r
	}
	r.Available, r.Message = o.available, o.availableMessage
	switch {
	case o.service == nil:
		r.State = StateLocal
	case *o.service == c.self:
		r.State, r.ServedBy = StateOwned, o.service.String()
	default:
		r.State, r.ServedBy, r.Product = StateOtherService, o.service.String(), product(o.service)
	}
	return r
}

// record stores r, sets the gauge and logs when the state or owner changed.
func (c *Checker) record(r Result) {
	c.mu.Lock()
	prev, seen := c.results[r.APIService]
	c.results[r.APIService] = r
	c.mu.Unlock()

	switch r.State {
	case StateOwned:
		c.owned.WithLabelValues(r.APIService).Set(1)
	case StateUnknown:
		// Keep the last known value: a failed read says nothing about the owner.
	default:
		c.owned.WithLabelValues(r.APIService).Set(0)
	}
	changed := !seen || prev.State != r.State || prev.ServedBy != r.ServedBy
	if !changed {
		klog.V(4).InfoS("Checked APIService", "apiService", r.APIService, "state", r.State, "servedBy", r.ServedBy, "available", r.Available)
		return
	}
	switch r.State {
	case StateOwned:
		klog.InfoS("APIService routes to this adapter", "apiService", r.APIService, "service", r.ServedBy, "available", r.Available)
	case StateOtherService:
		klog.ErrorS(nil, "APIService routes to another service: HPAs using it do not reach this adapter",
			"apiService", r.APIService, "servedBy", r.ServedBy, "product", r.Product, "adapterService", c.self.String(),
			"fix", "uninstall or disable the other product's APIService, then apply this adapter's (see docs/migration.md)")
	case StateLocal:
		klog.ErrorS(nil, "APIService is served by kube-apiserver itself, not by this adapter",
			"apiService", r.APIService, "adapterService", c.self.String())
	case StateMissing:
		klog.ErrorS(nil, "APIService does not exist: nothing routes to this adapter",
			"apiService", r.APIService, "adapterService", c.self.String(), "fix", "apply the adapter's APIService manifest")
	case StateUnknown:
		klog.ErrorS(nil, "Cannot read APIService", "apiService", r.APIService, "err", r.Message,
			"fix", "grant get on apiregistration.k8s.io apiservices (resourceNames: the --apiservices names)")
	}
}

// Results returns the last result of each APIService, in the order of the
// names given to NewChecker; those not checked yet are left out.
func (c *Checker) Results() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Result, 0, len(c.names))
	for _, n := range c.names {
		if r, ok := c.results[n]; ok {
			out = append(out, r)
		}
	}
	return out
}

// Status summarises the last results in one line for logs, e.g.
// "v1beta1.external.metrics.k8s.io: owned (available True); v1beta2.custom.metrics.k8s.io: other-service keda/keda-metrics-apiserver (KEDA)".
func (c *Checker) Status() string {
	rs := c.Results()
	if len(rs) == 0 {
		return "not checked yet"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		s := r.APIService + ": " + string(r.State)
		switch r.State {
		case StateOwned:
			if r.Available != "" {
				s += " (available " + r.Available + ")"
			}
		case StateOtherService:
			s += " " + r.ServedBy
			if r.Product != "" {
				s += " (" + r.Product + ")"
			}
		case StateUnknown:
			s += " (" + r.Message + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// ServeHTTP answers GET with the last results as JSON,
// {"adapterService":"ns/name","apiServices":[Result...]}, always with status
// 200: it reports, it is not a health check.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		AdapterService string   `json:"adapterService"`
		APIServices    []Result `json:"apiServices"`
	}{c.self.String(), c.Results()})
}

// product guesses the product behind a Service from the names its Helm charts
// and manifests use, for the log line; "" when unknown.
func product(s *Service) string {
	n := strings.ToLower(s.Namespace + "/" + s.Name)
	switch {
	case strings.Contains(n, "keda"):
		return "KEDA"
	case strings.Contains(n, "prometheus-adapter"):
		return "prometheus-adapter"
	case strings.Contains(n, "datadog"):
		return "Datadog Cluster Agent"
	case strings.Contains(n, "stackdriver"):
		return "custom-metrics-stackdriver-adapter"
	}
	return ""
}
