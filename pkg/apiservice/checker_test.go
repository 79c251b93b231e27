package apiservice

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/internal/metricdocs"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func withAvailable(u interface{ SetUnstructuredContent(map[string]any) }, obj map[string]any, status, message string) {
	obj["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "Available", "status": status, "reason": "Passed", "message": message,
	}}}
	u.SetUnstructuredContent(obj)
}

func TestCheck(t *testing.T) {
	keda := &Service{Namespace: "keda", Name: "keda-metrics-apiserver"}
	promAdapter := &Service{Namespace: "monitoring", Name: "prometheus-adapter"}
	owned := apiService(ExternalMetrics, &self, nil)
	withAvailable(owned, owned.Object, "True", "all checks passed")
	tests := []struct {
		name      string
		objs      []runtime.Object
		names     []string
		want      []Result
		wantGauge string
	}{
		{"owned", []runtime.Object{owned}, []string{ExternalMetrics},
			[]Result{{APIService: ExternalMetrics, State: StateOwned, ServedBy: "saturation-adapter/saturation-adapter", Available: "True", Message: "all checks passed", CheckedAt: t0}},
			`saturation_adapter_apiservice_owned{apiservice="v1beta1.external.metrics.k8s.io"} 1`},
		{"KEDA owns external metrics", []runtime.Object{apiService(ExternalMetrics, keda, nil)}, []string{ExternalMetrics},
			[]Result{{APIService: ExternalMetrics, State: StateOtherService, ServedBy: "keda/keda-metrics-apiserver", Product: "KEDA", CheckedAt: t0}},
			`saturation_adapter_apiservice_owned{apiservice="v1beta1.external.metrics.k8s.io"} 0`},
		{"prometheus-adapter owns custom metrics, external missing", []runtime.Object{apiService(customMetrics, promAdapter, nil)},
			[]string{ExternalMetrics, customMetrics},
			[]Result{
				{APIService: ExternalMetrics, State: StateMissing, CheckedAt: t0},
				{APIService: customMetrics, State: StateOtherService, ServedBy: "monitoring/prometheus-adapter", Product: "prometheus-adapter", CheckedAt: t0},
			},
			`saturation_adapter_apiservice_owned{apiservice="v1beta1.external.metrics.k8s.io"} 0
saturation_adapter_apiservice_owned{apiservice="v1beta2.custom.metrics.k8s.io"} 0`},
		{"same name in another namespace is not us", []runtime.Object{apiService(ExternalMetrics, &Service{Namespace: "other", Name: self.Name}, nil)},
			[]string{ExternalMetrics},
			[]Result{{APIService: ExternalMetrics, State: StateOtherService, ServedBy: "other/saturation-adapter", CheckedAt: t0}},
			`saturation_adapter_apiservice_owned{apiservice="v1beta1.external.metrics.k8s.io"} 0`},
		{"local", []runtime.Object{apiService(ExternalMetrics, nil, nil)}, []string{ExternalMetrics},
			[]Result{{APIService: ExternalMetrics, State: StateLocal, CheckedAt: t0}},
			`saturation_adapter_apiservice_owned{apiservice="v1beta1.external.metrics.k8s.io"} 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			c, err := NewChecker(newDynamic(tt.objs...), tt.names, self, clocktesting.NewFakeClock(t0), reg)
			if err != nil {
				t.Fatal(err)
			}
			got := c.Check(context.Background())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check() (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, c.Results()); diff != "" {
				t.Errorf("Results() (-want +got):\n%s", diff)
			}
			want := "# HELP saturation_adapter_apiservice_owned 1 when the APIService routes to this adapter's Service, 0 when it is missing, local or routes to another service.\n" +
				"# TYPE saturation_adapter_apiservice_owned gauge\n" + tt.wantGauge + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "saturation_adapter_apiservice_owned"); err != nil {
				t.Error(err)
			}
		})
	}
}

// A takeover after start is seen at the next check; a failed read keeps the last
// known gauge value and says why in Status.
func TestCheckTransitions(t *testing.T) {
	dyn := newDynamic(apiService(ExternalMetrics, &self, nil))
	clk := clocktesting.NewFakeClock(t0)
	reg := prometheus.NewRegistry()
	c, err := NewChecker(dyn, []string{ExternalMetrics}, self, clk, reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Status(); got != "not checked yet" {
		t.Errorf("Status() before a check = %q", got)
	}
	gauge := func() float64 { return testutil.ToFloat64(c.owned.WithLabelValues(ExternalMetrics)) }
	c.Check(context.Background())
	if gauge() != 1 || c.Status() != ExternalMetrics+": owned" {
		t.Errorf("owned: gauge %v, Status() %q", gauge(), c.Status())
	}

	// KEDA is installed and takes the APIService over.
	if _, err := dyn.Resource(Resource).Update(context.Background(),
		apiService(ExternalMetrics, &Service{Namespace: "keda", Name: "keda-metrics-apiserver"}, nil), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(DefaultCheckInterval)
	c.Check(context.Background())
	if want := ExternalMetrics + ": other-service keda/keda-metrics-apiserver (KEDA)"; gauge() != 0 || c.Status() != want {
		t.Errorf("after takeover: gauge %v, Status() %q; want 0, %q", gauge(), c.Status(), want)
	}

	// RBAC removed: unknown, gauge unchanged.
	dyn.PrependReactor("get", "apiservices", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: Resource.Group, Resource: Resource.Resource}, ExternalMetrics, errors.New("RBAC: access denied"))
	})
	r := c.Check(context.Background())
	if r[0].State != StateUnknown || !strings.Contains(r[0].Message, "forbidden") || gauge() != 0 {
		t.Errorf("forbidden read: %+v, gauge %v; want unknown with the error, gauge kept at 0", r[0], gauge())
	}
	if !strings.Contains(c.Status(), ExternalMetrics+": unknown (") {
		t.Errorf("Status() = %q, want the read error", c.Status())
	}
}

func TestRunChecksAtOnceAndEveryInterval(t *testing.T) {
	dyn := newDynamic(apiService(ExternalMetrics, &self, nil))
	clk := clocktesting.NewFakeClock(t0)
	c, err := NewChecker(dyn, []string{ExternalMetrics}, self, clk, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, DefaultCheckInterval) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-done:
				t.Fatalf("Run returned before %s", what)
			default:
				time.Sleep(time.Millisecond)
			}
		}
	}
	waitFor("the first check", func() bool { return len(c.Results()) == 1 && clk.HasWaiters() })
	if got := c.Results()[0].CheckedAt; !got.Equal(t0) {
		t.Errorf("first check at %v, want at once (%v)", got, t0)
	}
	clk.Step(DefaultCheckInterval)
	waitFor("the second check", func() bool { return c.Results()[0].CheckedAt.Equal(t0.Add(DefaultCheckInterval)) })
	cancel()
	<-done
}

func TestServeHTTP(t *testing.T) {
	c, err := NewChecker(newDynamic(apiService(ExternalMetrics, &Service{Namespace: "keda", Name: "keda-metrics-apiserver"}, nil)),
		[]string{ExternalMetrics}, self, clocktesting.NewFakeClock(t0), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c.Check(context.Background())
	srv := httptest.NewServer(c)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"adapterService": "saturation-adapter/saturation-adapter",
		"apiServices": []any{map[string]any{
			"apiService": ExternalMetrics, "state": "other-service", "servedBy": "keda/keda-metrics-apiserver",
			"product": "KEDA", "checkedAt": "2026-11-29T12:00:00Z",
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET: %d %s (-want +got):\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), diff)
	}
	post, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", post.StatusCode)
	}
}

func TestNewCheckerErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := clocktesting.NewFakeClock(t0)
	if _, err := NewChecker(newDynamic(), nil, self, clk, reg); err == nil {
		t.Error("no names: want an error")
	}
	if _, err := NewChecker(newDynamic(), []string{ExternalMetrics}, Service{Name: "x"}, clk, reg); err == nil || !strings.Contains(err.Error(), "--adapter-namespace") {
		t.Errorf("no namespace: %v, want an error naming --adapter-namespace", err)
	}
	if _, err := NewChecker(newDynamic(), []string{ExternalMetrics}, self, clk, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := NewChecker(newDynamic(), []string{ExternalMetrics}, self, clk, reg); err == nil {
		t.Error("registering twice on one registry: want an error")
	}
}

// TestMetricsDocumented keeps the documented metric table and the Checker's gauge
// in step: name, type and label.
func TestMetricsDocumented(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := NewChecker(newDynamic(), []string{ExternalMetrics}, self, clocktesting.NewFakeClock(t0), reg)
	if err != nil {
		t.Fatal(err)
	}
	c.Check(context.Background()) // missing: sets the gauge to 0
	metricdocs.Check(t, reg, "../../", 1, "apiservice")
}
