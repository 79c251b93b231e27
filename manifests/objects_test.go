package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// The install also holds objects of API groups client-go has no types for. Their real
// Go types live in k8s.io/kube-aggregator, github.com/cert-manager/cert-manager and
// github.com/prometheus-operator/prometheus-operator; requiring them would raise
// k8s.io/apiserver and others in go.mod (or pull in cert-manager whole) for tests only.
// Strict decoding into these mirrors of the fields the install sets still rejects
// unknown and misspelt fields; a field the install starts using must be added here.

// apiService mirrors apiregistration.k8s.io/v1 APIService.
type apiService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Service *struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			Port      *int32 `json:"port"`
		} `json:"service"`
		Group                 string `json:"group"`
		Version               string `json:"version"`
		InsecureSkipTLSVerify bool   `json:"insecureSkipTLSVerify"`
		CABundle              []byte `json:"caBundle"`
		GroupPriorityMinimum  int32  `json:"groupPriorityMinimum"`
		VersionPriority       int32  `json:"versionPriority"`
	} `json:"spec"`
}

// issuer mirrors cert-manager.io/v1 Issuer.
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

// certificate mirrors cert-manager.io/v1 Certificate.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA        bool     `json:"isCA"`
		CommonName  string   `json:"commonName"`
		SecretName  string   `json:"secretName"`
		DNSNames    []string `json:"dnsNames"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Usages    []string `json:"usages"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// serviceMonitor mirrors monitoring.coreos.com/v1 ServiceMonitor.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port            string `json:"port"`
			Scheme          string `json:"scheme"`
			Path            string `json:"path"`
			Interval        string `json:"interval"`
			HonorLabels     bool   `json:"honorLabels"`
			BearerTokenFile string `json:"bearerTokenFile"`
			Authorization   *struct {
				Type        string                    `json:"type"`
				Credentials *corev1.SecretKeySelector `json:"credentials"`
			} `json:"authorization"`
			TLSConfig *struct {
				ServerName         string `json:"serverName"`
				InsecureSkipVerify bool   `json:"insecureSkipVerify"`
				CA                 *struct {
					Secret    *corev1.SecretKeySelector    `json:"secret"`
					ConfigMap *corev1.ConfigMapKeySelector `json:"configMap"`
				} `json:"ca"`
			} `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// prometheusRule mirrors monitoring.coreos.com/v1 PrometheusRule.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

// ruleGroup is one group of a PrometheusRule, in the shape of a Prometheus rule file's
// groups (which is what the Prometheus Operator writes out).
type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []struct {
		Alert       string            `json:"alert,omitempty"`
		Record      string            `json:"record,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

// mirror returns an empty mirror for gvk, or false for kinds client-go decodes itself.
func mirror(gvk schema.GroupVersionKind) (any, bool) {
	switch gvk {
	case schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}:
		return &apiService{}, true
	case schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}:
		return &issuer{}, true
	case schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}:
		return &certificate{}, true
	case schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}:
		return &serviceMonitor{}, true
	case schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}:
		return &prometheusRule{}, true
	}
	return nil, false
}

// decodeFile returns every YAML document of path as a typed object (see decode).
func decodeFile(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, path, data)
}

// decode returns every YAML document of data (named name in errors) as a typed object:
// a client-go type (*appsv1.Deployment, ...) or one of the mirrors above. Unknown
// kinds, unknown fields and duplicate fields fail the test.
func decode(t *testing.T, name string, data []byte) []any {
	t.Helper()
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []any
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if tm.Kind == "" { // comments only
			continue
		}
		if obj, ok := mirror(tm.GroupVersionKind()); ok {
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: document %d (%s): %v", name, i, tm.Kind, err)
			}
			objs = append(objs, obj)
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: document %d (%s %s): %v", name, i, tm.APIVersion, tm.Kind, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

// only returns the one object of type T named name, failing the test otherwise.
func only[T interface{ GetName() string }](t *testing.T, objs []any, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok && v.GetName() == name {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want one %T named %q, found %d", zero, name, len(found))
	}
	return found[0]
}

// all returns every object of type T.
func all[T any](objs []any) []T {
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// metav1LabelSelector converts a label selector, as metav1.LabelSelectorAsSelector.
func metav1LabelSelector(s metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&s)
}

// labelSet is labels.Set(m).
func labelSet(m map[string]string) labels.Set { return labels.Set(m) }

// mapKeys yields the keys of m.
func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
