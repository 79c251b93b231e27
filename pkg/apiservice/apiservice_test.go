package apiservice

import (
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

var self = Service{Namespace: "saturation-adapter", Name: "saturation-adapter"}

const customMetrics = "v1beta2.custom.metrics.k8s.io"

// apiService returns an APIService as the API server stores it; svc nil makes
// a local one (no spec.service).
func apiService(name string, svc *Service, mutate func(spec map[string]any)) *unstructured.Unstructured {
	group, version := "external.metrics.k8s.io", "v1beta1"
	if strings.Contains(name, "custom.metrics") {
		group, version = "custom.metrics.k8s.io", "v1beta2"
	}
	spec := map[string]any{"group": group, "version": version, "groupPriorityMinimum": int64(100), "versionPriority": int64(100)}
	if svc != nil {
		spec["service"] = map[string]any{"namespace": svc.Namespace, "name": svc.Name, "port": int64(443)}
	}
	if mutate != nil {
		mutate(spec)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name, "resourceVersion": "1"},
		"spec":     spec,
	}}
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Resource: "APIServiceList"}, objs...)
}

func getSpec(t *testing.T, c *dynamicfake.FakeDynamicClient, name string) map[string]any {
	t.Helper()
	u, err := c.Resource(Resource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.Object["spec"].(map[string]any)
}

func countUpdates(c *dynamicfake.FakeDynamicClient) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" {
			n++
		}
	}
	return n
}

func TestPodNamespace(t *testing.T) {
	file := func(content string, err error) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if name != ServiceAccountNamespaceFile {
				t.Errorf("read %s, want %s", name, ServiceAccountNamespaceFile)
			}
			return []byte(content), err
		}
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "POD_NAMESPACE" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name     string
		getenv   func(string) string
		readFile func(string) ([]byte, error)
		want     string
	}{
		{"downward API variable first", env("llm-system"), file("other\n", nil), "llm-system"},
		{"service account file, trimmed", env(""), file("saturation-adapter\n", nil), "saturation-adapter"},
		{"outside a pod", env(""), file("", fs.ErrNotExist), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodNamespace(tt.getenv, tt.readFile); got != tt.want {
				t.Errorf("PodNamespace() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		want   []string
	}{
		{"defaults", func(*Options) {}, nil},
		{"both groups", func(o *Options) { o.APIServices = []string{ExternalMetrics, customMetrics}; o.Namespace = "llm" }, nil},
		{"bad APIService name", func(o *Options) { o.APIServices = []string{"V1Beta1_external"} }, []string{`--apiservices=V1Beta1_external: "V1Beta1_external"`}},
		{"duplicate APIService", func(o *Options) { o.APIServices = []string{ExternalMetrics, ExternalMetrics} }, []string{"--apiservices="}},
		{"bad namespace and service together", func(o *Options) { o.Namespace = "Bad_NS"; o.Service = "9svc" },
			[]string{"--adapter-namespace=Bad_NS", "--adapter-service=9svc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			tt.mutate(o)
			errs := o.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors naming %q", errs, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to name %q", i, errs[i], w)
				}
			}
		})
	}
}

func TestOptionsEnabled(t *testing.T) {
	o := NewOptions()
	if o.Enabled() {
		t.Error("Enabled() without a namespace = true")
	}
	o.Namespace = "saturation-adapter"
	if !o.Enabled() || o.Self() != self {
		t.Errorf("Enabled() = %v, Self() = %v; want true, %v", o.Enabled(), o.Self(), self)
	}
}

func TestPublish(t *testing.T) {
	bundle := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	keda := &Service{Namespace: "keda", Name: "keda-metrics-apiserver"}
	c := newDynamic(
		apiService(ExternalMetrics, &self, func(s map[string]any) { s["insecureSkipTLSVerify"] = true }),
		apiService(customMetrics, keda, func(s map[string]any) { s["caBundle"] = "a2VkYQ==" }),
	)
	p := NewPublisher(c, []string{ExternalMetrics, customMetrics, "v1beta1.custom.metrics.k8s.io"}, self)
	if err := p.Publish(context.Background(), bundle); err != nil {
		t.Fatalf("Publish() = %v", err)
	}
	got := getSpec(t, c, ExternalMetrics)
	if got["caBundle"] != base64.StdEncoding.EncodeToString(bundle) || got["insecureSkipTLSVerify"] != false {
		t.Errorf("owned APIService spec = %v, want caBundle = the bundle, insecureSkipTLSVerify false", got)
	}
	if diff := cmp.Diff(apiService(customMetrics, keda, func(s map[string]any) { s["caBundle"] = "a2VkYQ==" }).Object["spec"],
		getSpec(t, c, customMetrics)); diff != "" {
		t.Errorf("KEDA's APIService was changed (-want +got):\n%s", diff)
	}
	if n := countUpdates(c); n != 1 {
		t.Errorf("%d updates, want 1 (the owned APIService only)", n)
	}

	// Unchanged: no write.
	c.ClearActions()
	if err := p.Publish(context.Background(), bundle); err != nil || countUpdates(c) != 0 {
		t.Errorf("second Publish() = %v with %d updates, want nil and none", err, countUpdates(c))
	}
	if err := p.Publish(context.Background(), nil); err == nil {
		t.Error("Publish(empty) = nil, want an error")
	}
}

func TestPublishRetriesConflict(t *testing.T) {
	c := newDynamic(apiService(ExternalMetrics, &self, nil))
	conflicts := 0
	c.PrependReactor("update", "apiservices", func(clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: Resource.Group, Resource: Resource.Resource}, ExternalMetrics, errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	bundle := []byte("pem")
	if err := NewPublisher(c, []string{ExternalMetrics}, self).Publish(context.Background(), bundle); err != nil {
		t.Fatalf("Publish() = %v, want the conflict retried", err)
	}
	var verbs []string
	for _, a := range c.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if diff := cmp.Diff([]string{"get", "update", "get", "update"}, verbs); diff != "" {
		t.Errorf("actions (-want +got), want a re-read after the conflict:\n%s", diff)
	}
	if got := getSpec(t, c, ExternalMetrics)["caBundle"]; got != base64.StdEncoding.EncodeToString(bundle) {
		t.Errorf("caBundle = %v after a conflict", got)
	}
}

func TestPublishReportsErrors(t *testing.T) {
	c := newDynamic(apiService(ExternalMetrics, &self, nil))
	c.PrependReactor("update", "apiservices", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: Resource.Group, Resource: Resource.Resource}, ExternalMetrics, errors.New("RBAC"))
	})
	err := NewPublisher(c, []string{ExternalMetrics}, self).Publish(context.Background(), []byte("pem"))
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "writing spec.caBundle of APIService "+ExternalMetrics) {
		t.Errorf("Publish() = %v, want a wrapped Forbidden naming the APIService", err)
	}
}
