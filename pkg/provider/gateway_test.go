package provider

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Issue 8: a policy with a gateway input adds the gateway's queue to the demand,
// and a pool of zero pods is a state, not an error: it serves the gateway's
// demand so that an HPA at zero replicas wakes on the first waiting request.
func TestGatewayInput(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen3-32b-pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw},
		policy.Policy{Name: "gw-mean", Kind: policy.KindMean, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw},
		policy.Policy{Name: "gw-typo", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(),
			Gateway: &policy.GatewayInput{Selector: "app=epq", Match: map[string]string{"inference_pool": "x"}}},
	)...)
	if err != nil {
		t.Fatal(err)
	}
	epp := newEngine(t, sample(t, "hazards/NC-04-epp.prom")) // 352 + 28 held for qwen3-32b-pool
	f := newFixtureCatalog(t, catalog,
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: epp},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.78\n")},
		podSpec{name: "vllm-b", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 5\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.79\n")},
	)
	// Engines just under their set points (0.975 and 1.0) while 380 wait in the
	// gateway: 380 / 5 = 76 more replicas' worth (hazard NC-04).
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "77975m" {
		t.Errorf("gw-demand = %s, want 77975m (1.975 + 76)", got)
	}
	if got := f.value(t, "llm", "gw-mean", "app=vllm"); got != "38988m" {
		t.Errorf("gw-mean = %s, want 38988m ((1.975 + 76) / 2, rounded)", got)
	}
	r := f.get(t, "llm", "gw-demand", "app=vllm")
	if got := r.list.Items[0].MetricLabels["gateway_queue"]; got != "380" {
		t.Errorf("metricLabels gateway_queue = %q, want 380", got)
	}
	if got := f.value(t, "llm", policy.MetricDemandReplicas, "app=vllm"); got != "1975m" {
		t.Errorf("the engine-only llm_demand_replicas = %s, want 1975m: it does not see the gateway", got)
	}
	// Zero pods: the gateway's demand alone.
	if got := f.value(t, "llm", "gw-demand", "app=vllm-zero"); got != "76" {
		t.Errorf("zero pods: gw-demand = %s, want 76", got)
	}
	if got := f.value(t, "llm", "gw-mean", "app=vllm-zero"); got != "76" {
		t.Errorf("zero pods: gw-mean = %s, want 76 (the HPA computes ceil(value / target) at zero replicas)", got)
	}
	// Zero pods without a gateway input stays an error, and says why.
	r = f.get(t, "llm", policy.MetricDemandReplicas, "app=vllm-zero")
	if r.code != http.StatusNotFound || !strings.Contains(r.status.Message, "scale from zero needs a policy with a gateway input") {
		t.Errorf("zero pods, no gateway: HTTP %d %q", r.code, r.status.Message)
	}
	// No gateway pod: an error naming the input, never 0.
	r = f.get(t, "llm", "gw-typo", "app=vllm")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "gateway input (pods app=epq in namespace llm)") {
		t.Errorf("no gateway pod: HTTP %d %q", r.code, r.status.Message)
	}
	// The gateway's metrics failing: unknown, an error.
	epp.set(http.StatusInternalServerError, "")
	f.clock.Step(10 * time.Second)
	r = f.get(t, "llm", "gw-demand", "app=vllm-zero")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "the gateway's queue is unknown") {
		t.Errorf("gateway failing: HTTP %d %q", r.code, r.status.Message)
	}
}

// authEngine is an endpoint picker whose /metrics wants a bearer token (the
// inference extension's --metrics-endpoint-auth): it answers 401 to any other
// Authorization and records what each request sent.
func authEngine(t *testing.T, body string, token *atomic.Value, seen *atomic.Value) *engine {
	e := &engine{body: body, code: http.StatusOK}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") != "Bearer "+token.Load().(string) {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// A gateway input with bearerTokenFile sends the file's token to the gateway's
// pods only (never to engines), reads the file on every scrape (a rotated
// token is used on the next scrape), and an unreadable file is a 503 that
// names neither the path nor the token. Issue 20: the token went to any pod
// matching the gateway's selector in the watched namespace; it now goes only
// to pods of the input's namespace (an operator's) running as its
// ServiceAccount: a pod that copies the labels gets nothing.
func TestGatewayBearerToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var want, eppSaw, engineSaw, forgedSaw, tenantSaw atomic.Value
	want.Store("s3cret")
	mk := func(name, selector, tokenFile string) policy.Policy {
		return policy.Policy{Name: name, Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(),
			Gateway: &policy.GatewayInput{Namespace: "gw", ServiceAccount: "epp", Selector: selector,
				Match: map[string]string{"inference_pool": "qwen3-32b-pool"}, BearerTokenFile: tokenFile}}
	}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		mk("gw-token", "app=epp", file), mk("gw-missing", "app=epp-b", filepath.Join(dir, "absent")), mk("gw-forged", "app=epp-c", file))...)
	if err != nil {
		t.Fatal(err)
	}
	vllm := &engine{}
	vllm.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		engineSaw.Store(r.Header.Get("Authorization"))
		io.WriteString(w, "vllm:num_requests_waiting{engine=\"0\"} 4\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.78\n")
	}))
	t.Cleanup(vllm.srv.Close)
	epp := sample(t, "hazards/NC-04-epp.prom")
	f := newFixtureCatalog(t, catalog,
		podSpec{ns: "gw", name: "epp-0", sa: "epp", labels: map[string]string{"app": "epp"}, engine: authEngine(t, epp, &want, &eppSaw)},
		podSpec{ns: "gw", name: "epp-b", sa: "epp", labels: map[string]string{"app": "epp-b"}, engine: authEngine(t, epp, &want, &eppSaw)},
		// In the operator's namespace under another account: not the gateway's.
		podSpec{ns: "gw", name: "epp-c", sa: "default", labels: map[string]string{"app": "epp-c"}, engine: authEngine(t, epp, &want, &forgedSaw)},
		// A tenant's pod with the gateway's labels and account name, in its own namespace.
		podSpec{name: "not-epp", sa: "epp", labels: map[string]string{"app": "epp"}, engine: authEngine(t, epp, &want, &tenantSaw)},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm"}, engine: vllm},
	)
	if got := f.value(t, "llm", "gw-token", "app=vllm"); got != "76975m" {
		t.Errorf("gw-token = %s, want 76975m (0.975 + 380 / 5)", got)
	}
	if s, _ := engineSaw.Load().(string); s != "" {
		t.Errorf("an engine was sent Authorization %q: the token goes to the gateway's pods only", s)
	}
	// Rotation: the file and the server change; the next scrape sends the new token.
	want.Store("rotated")
	if err := os.WriteFile(file, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(time.Second)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	if got := f.value(t, "llm", "gw-token", "app=vllm"); got != "76975m" {
		t.Errorf("after rotation: gw-token = %s, want 76975m", got)
	}
	if s, _ := eppSaw.Load().(string); s != "Bearer rotated" {
		t.Errorf("after rotation the gateway was sent %q, want the new token", s)
	}
	r := f.get(t, "llm", "gw-missing", "app=vllm")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "bearer token file cannot be read") ||
		strings.Contains(r.status.Message, dir) {
		t.Errorf("unreadable token file: HTTP %d %q, want 503 saying the token file cannot be read, without its path", r.code, r.status.Message)
	}
	// A pod under another ServiceAccount is not scraped (the input is unknown).
	r = f.get(t, "llm", "gw-forged", "app=vllm")
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, `runs as ServiceAccount "default", not the gateway's "epp"`) {
		t.Errorf("a gateway pod under another account: HTTP %d %q, want 503 saying so", r.code, r.status.Message)
	}
	f.clock.Step(time.Second)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	for who, saw := range map[string]*atomic.Value{"the pod under another account": &forgedSaw, "the tenant's look-alike pod": &tenantSaw} {
		if s, _ := saw.Load().(string); s != "" {
			t.Errorf("%s was sent Authorization %q", who, s)
		}
	}
}

// Issue 20: a gateway queue of NaN, -3, 1e300 or +Inf was read as 0, and an
// HPA on the gateway policy went 14 → 4. The gateway's values follow the
// engines' validity rules: rejected, counted (invalid_samples_total) and the
// input is missing (503, the HPA holds), never 0. Duplicate gateway series
// (one body exporting a series twice) count once, by the duplicate rule.
func TestGatewayInvalidValues(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	const flow = "inference_extension_flow_control_pool_saturation{inference_pool=\"pool\"} 1\n"
	queue := func(v string) string {
		return "inference_extension_flow_control_queue_size{fairness_id=\"a\",inference_pool=\"pool\",priority=\"0\"} " + v + "\n" + flow
	}
	epp := newEngine(t, queue("50"))
	f := newFixtureCatalog(t, catalog,
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: epp},
		podSpec{name: "vllm-a", labels: map[string]string{"app": "vllm"}, engine: newEngine(t, "vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.1\n")},
	)
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "10200m" {
		t.Fatalf("gw-demand = %s, want 10200m (0.2 + 50 / 5)", got)
	}
	for _, tc := range []struct{ value, reason string }{
		{"NaN", "nan"}, {"-3", "negative"}, {"1e300", "above_range"}, {"+Inf", "inf"}, {"-Inf", "inf"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			before := testutil.ToFloat64(f.scrapeMetrics.InvalidSamples.WithLabelValues(tc.reason))
			epp.set(http.StatusOK, queue(tc.value))
			f.clock.Step(time.Second)
			f.scraper.Sync(context.Background(), f.pools.Targets())
			r := f.get(t, "llm", "gw-demand", "app=vllm")
			if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "rejected ("+tc.reason+")") {
				t.Errorf("gateway queue %s: HTTP %d %q (value %v), want 503 saying the series was rejected: never a queue of 0",
					tc.value, r.code, r.status.Message, r.list.Items)
			}
			if got := testutil.ToFloat64(f.scrapeMetrics.InvalidSamples.WithLabelValues(tc.reason)) - before; got < 1 {
				t.Errorf("invalid_samples_total{reason=%q} grew by %g, want the rejection counted", tc.reason, got)
			}
		})
	}
	// A valid series beside a rejected duplicate of it: the valid one counts.
	epp.set(http.StatusOK, queue("50")+"inference_extension_flow_control_queue_size{fairness_id=\"a\",inference_pool=\"pool\",priority=\"0\"} NaN\n")
	f.clock.Step(time.Second)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "10200m" {
		t.Errorf("a valid series beside its rejected duplicate: gw-demand = %s, want 10200m", got)
	}
	// The same series twice in one body: counted once (it was summed twice).
	epp.set(http.StatusOK, queue("50")+queue("50"))
	f.clock.Step(time.Second)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "10200m" {
		t.Errorf("a duplicated gateway series: gw-demand = %s, want 10200m (counted once)", got)
	}
	// Disagreeing duplicates: their maximum, counted.
	before := testutil.ToFloat64(f.scrapeMetrics.DuplicateSeries.WithLabelValues(string(signals.DuplicateDisagree)))
	epp.set(http.StatusOK, queue("50")+queue("10"))
	f.clock.Step(time.Second)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "10200m" {
		t.Errorf("disagreeing gateway duplicates: gw-demand = %s, want 10200m (their maximum)", got)
	}
	if got := testutil.ToFloat64(f.scrapeMetrics.DuplicateSeries.WithLabelValues(string(signals.DuplicateDisagree))) - before; got != 1 {
		t.Errorf("duplicate_series_total{outcome=disagree} grew by %g, want 1", got)
	}
}

// NC-26: two namespaces run endpoint pickers of the same pool name whose
// series carry no namespace label (team-a holds 40, team-b 3). Each HPA's
// gateway input reads the pickers of its own namespace: 40 and 3 waiting,
// never 43.
func TestGatewayDemandByNamespace(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen-pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureCatalog(t, catalog,
		podSpec{ns: "team-a", name: "epp-0", labels: map[string]string{"app": "epp"}, engine: newEngine(t, sample(t, "hazards/NC-26-epp-team-a.prom"))},
		podSpec{ns: "team-b", name: "epp-0", labels: map[string]string{"app": "epp"}, engine: newEngine(t, sample(t, "hazards/NC-26-epp-team-b.prom"))},
	)
	// Zero engine pods: the gateway's demand alone, 40 / 5 and 3 / 5.
	for ns, want := range map[string]string{"team-a": "8", "team-b": "600m"} {
		if got := f.value(t, ns, "gw-demand", "app=vllm"); got != want {
			t.Errorf("%s: gw-demand = %s, want %s", ns, got, want)
		}
	}
}

// Scale from zero in flight (issue 19, item 3): the gateway held requests, the
// HPA scaled 0 -> 1, and the pod is loading its model (Pending, then Running
// and not Ready) when the requests time out and the gateway's queue empties.
// The demand served stays at least 1 while the pod is starting, so the HPA
// (AverageValue 1) does not delete it before it served; past the start-up
// grace it does not.
func TestScaleFromZeroInFlight(t *testing.T) {
	gw := &policy.GatewayInput{Selector: "app=epp", Match: map[string]string{"inference_pool": "qwen-pool"}}
	catalog, err := policy.NewCatalog(append(policy.BuiltinPolicies(policy.DefaultSetPoints(), 1, 0),
		policy.Policy{Name: "gw-demand", Kind: policy.KindDemand, UnknownSaturation: 1, Terms: policy.DefaultSetPoints().Terms(), Gateway: gw})...)
	if err != nil {
		t.Fatal(err)
	}
	// The endpoint picker with its flows idle (llm-d-router: pool saturation 0, no queue).
	epp := newEngine(t, "llm_d_epp_flow_control_pool_saturation{inference_pool=\"qwen-pool\",stage=\"effective\"} 0\n")
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f := newFixtureCatalog(t, catalog,
		podSpec{name: "epp-0", labels: map[string]string{"app": "epp"}, engine: epp},
		podSpec{name: "vllm-0", labels: map[string]string{"app": "vllm"}, pending: true, created: now.Add(-2 * time.Minute)},
	)
	r := f.get(t, "llm", "gw-demand", "app=vllm")
	if r.code != http.StatusOK || r.list.Items[0].Value.String() != "1" || r.list.Items[0].MetricLabels["pods_starting"] != "1" {
		t.Fatalf("starting pod, empty gateway: HTTP %d %+v, want 1 with pods_starting 1", r.code, r.list)
	}
	// Past the grace the pod is no longer held: the empty gateway's 0.
	f.clock.Step(9 * time.Minute)
	f.scraper.Sync(context.Background(), f.pools.Targets())
	if got := f.value(t, "llm", "gw-demand", "app=vllm"); got != "0" {
		t.Errorf("past the start-up grace: gw-demand = %s, want 0", got)
	}
}
