// Package apiservice reads and writes the adapter's APIService objects
// (apiregistration.k8s.io/v1): who serves them (Checker) and which CA bundle the
// aggregator verifies the adapter with (Publisher). It talks to the API server
// through the dynamic client, so the adapter needs no k8s.io/kube-aggregator
// module (whose v0.37.2 would raise k8s.io/apiserver above the release
// custom-metrics-apiserver is built with) for the four fields it touches.
package apiservice

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// Resource is the APIService resource, apiregistration.k8s.io/v1 apiservices.
var Resource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// ExternalMetrics is the APIService of external.metrics.k8s.io/v1beta1, the one
// every HPA External metric goes through; only one service can own it in a cluster.
const ExternalMetrics = "v1beta1.external.metrics.k8s.io"

// ServiceAccountNamespaceFile is where a pod's service account token volume
// puts its namespace (the in-cluster configuration reads the same file,
// k8s.io/client-go/rest/config.go).
const ServiceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Service names a Service: the one an APIService's spec.service points at.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String returns "namespace/name".
func (s Service) String() string { return s.Namespace + "/" + s.Name }

// Options identify the adapter to the aggregation layer: the APIServices it
// should serve and its own Service, which those APIServices should point at.
// The ownership Checker and the managed serving certificate share them, so the
// two cannot disagree about who the adapter is.
type Options struct {
	// APIServices are the names of the APIService objects that should route to
	// this adapter, e.g. "v1beta1.external.metrics.k8s.io".
	APIServices []string
	// Namespace is the adapter's own namespace: where its Service (and, with a
	// managed serving certificate, its Secret) lives. Empty until Complete
	// finds the pod's namespace.
	Namespace string
	// Service is the name of the adapter's Service in Namespace.
	Service string
}

// NewOptions returns the defaults: the External metrics APIService, served by
// the Service "saturation-adapter" (the names manifests/ installs).
func NewOptions() *Options {
	return &Options{APIServices: []string{ExternalMetrics}, Service: "saturation-adapter"}
}

// AddFlags adds --apiservices, --adapter-namespace and --adapter-service.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.APIServices, "apiservices", o.APIServices,
		"APIServices that should route to this adapter. Each is checked at start-up and every minute: when it is missing or points at another service (KEDA, prometheus-adapter, ...) an error is logged and saturation_adapter_apiservice_owned is 0. With --tls-managed-secret their spec.caBundle is kept equal to the adapter's CA. Add v1beta2.custom.metrics.k8s.io when you install that APIService.")
	fs.StringVar(&o.Namespace, "adapter-namespace", o.Namespace,
		"The adapter's own namespace, where its Service and its --tls-managed-secret live; default the pod's namespace (POD_NAMESPACE, else "+ServiceAccountNamespaceFile+").")
	fs.StringVar(&o.Service, "adapter-service", o.Service,
		"Name of the adapter's Service in --adapter-namespace: the one --apiservices should point at.")
}

// Complete fills Namespace from the pod when it is empty: the POD_NAMESPACE
// environment variable (set it from the downward API, fieldRef
// metadata.namespace), else the service account's namespace file. Namespace
// stays empty outside a pod; Enabled then says false.
func (o *Options) Complete() {
	if o.Namespace == "" {
		o.Namespace = PodNamespace(os.Getenv, os.ReadFile)
	}
}

// PodNamespace returns the namespace the process runs in: getenv("POD_NAMESPACE"),
// else the trimmed content of ServiceAccountNamespaceFile, else "". getenv and
// readFile are os.Getenv and os.ReadFile outside tests.
func PodNamespace(getenv func(string) string, readFile func(string) ([]byte, error)) string {
	if ns := strings.TrimSpace(getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := readFile(ServiceAccountNamespaceFile); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// Enabled reports whether the adapter knows who it is: a namespace, a Service
// and at least one APIService. Outside a pod without --adapter-namespace it
// does not, and the ownership check cannot run.
func (o *Options) Enabled() bool {
	return o.Namespace != "" && o.Service != "" && len(o.APIServices) > 0
}

// Self returns the adapter's Service.
func (o *Options) Self() Service { return Service{Namespace: o.Namespace, Name: o.Service} }

// Validate returns one error per bad flag, naming the flag and its value. An
// empty namespace is not an error here (see Enabled); the managed serving
// certificate requires one and says so.
func (o *Options) Validate() []error {
	var errs []error
	seen := map[string]bool{}
	for _, n := range o.APIServices {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 || seen[n] {
			errs = append(errs, fmt.Errorf("--apiservices=%s: %q is not a valid, distinct APIService name such as %s",
				strings.Join(o.APIServices, ","), n, ExternalMetrics))
			break
		}
		seen[n] = true
	}
	if o.Namespace != "" {
		if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--adapter-namespace=%s: %s", o.Namespace, strings.Join(msgs, "; ")))
		}
	}
	if msgs := validation.IsDNS1035Label(o.Service); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--adapter-service=%s: %s", o.Service, strings.Join(msgs, "; ")))
	}
	return errs
}

// object is what the adapter reads of one APIService.
type object struct {
	// service is nil for an APIService served by kube-apiserver itself (no spec.service).
	service               *Service
	caBundle              []byte
	insecureSkipTLSVerify bool
	// available is the Available condition's status ("True", "False",
	// "Unknown"), "" when absent; availableMessage its message.
	available        string
	availableMessage string
}

// decode reads the fields the adapter needs from an unstructured APIService.
func decode(u *unstructured.Unstructured) (object, error) {
	var o object
	svc, found, err := unstructured.NestedMap(u.Object, "spec", "service")
	if err != nil {
		return o, fmt.Errorf("reading spec.service of APIService %s: %w", u.GetName(), err)
	}
	if found && svc != nil {
		ns, _, _ := unstructured.NestedString(svc, "namespace")
		name, _, _ := unstructured.NestedString(svc, "name")
		o.service = &Service{Namespace: ns, Name: name}
	}
	if s, found, err := unstructured.NestedString(u.Object, "spec", "caBundle"); err != nil {
		return o, fmt.Errorf("reading spec.caBundle of APIService %s: %w", u.GetName(), err)
	} else if found {
		if o.caBundle, err = base64.StdEncoding.DecodeString(s); err != nil {
			return o, fmt.Errorf("decoding spec.caBundle of APIService %s: %w", u.GetName(), err)
		}
	}
	o.insecureSkipTLSVerify, _, _ = unstructured.NestedBool(u.Object, "spec", "insecureSkipTLSVerify")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Available" {
			continue
		}
		o.available, _ = m["status"].(string)
		o.availableMessage, _ = m["message"].(string)
	}
	return o, nil
}

// Publisher keeps spec.caBundle of the adapter's APIServices equal to the CA
// bundle that verifies its serving certificate. Safe for concurrent use.
type Publisher struct {
	client dynamic.NamespaceableResourceInterface
	names  []string
	self   Service
}

// NewPublisher returns a Publisher for the named APIServices, writing only to
// those whose spec.service is self.
func NewPublisher(client dynamic.Interface, names []string, self Service) *Publisher {
	return &Publisher{client: client.Resource(Resource), names: names, self: self}
}

// Publish makes spec.caBundle of every named APIService that points at the
// adapter's Service equal to bundle (PEM) and sets spec.insecureSkipTLSVerify to
// false (the API server rejects both together: kube-aggregator
// pkg/apis/apiregistration/validation/validation.go). Each write is an Update
// carrying the resourceVersion read, retried on conflict.
//
// An APIService that does not exist or points at another service is left alone
// and is not an error: nobody reaches the adapter through it, and writing a CA
// into another product's APIService would break that product's TLS (the
// Checker reports those). Errors reading or writing the others are joined;
// nil means each APIService that routes to the adapter now carries bundle.
func (p *Publisher) Publish(ctx context.Context, bundle []byte) error {
	if len(bundle) == 0 {
		return errors.New("publishing an empty CA bundle")
	}
	var errs []error
	for _, name := range p.names {
		if err := p.publishOne(ctx, name, bundle); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Publisher) publishOne(ctx context.Context, name string, bundle []byte) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := p.client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			klog.V(2).InfoS("Not publishing the CA bundle: APIService does not exist", "apiService", name)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading APIService %s: %w", name, err)
		}
		o, err := decode(u)
		if err != nil {
			return err
		}
		if o.service == nil || *o.service != p.self {
			klog.V(2).InfoS("Not publishing the CA bundle: APIService routes to another service",
				"apiService", name, "servedBy", describe(o.service), "adapterService", p.self.String())
			return nil
		}
		if string(o.caBundle) == string(bundle) && !o.insecureSkipTLSVerify {
			return nil
		}
		if err := unstructured.SetNestedField(u.Object, base64.StdEncoding.EncodeToString(bundle), "spec", "caBundle"); err != nil {
			return fmt.Errorf("setting spec.caBundle of APIService %s: %w", name, err)
		}
		if err := unstructured.SetNestedField(u.Object, false, "spec", "insecureSkipTLSVerify"); err != nil {
			return fmt.Errorf("setting spec.insecureSkipTLSVerify of APIService %s: %w", name, err)
		}
		if _, err := p.client.Update(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("writing spec.caBundle of APIService %s: %w", name, err)
		}
		klog.InfoS("Published the CA bundle to the APIService", "apiService", name, "bytes", len(bundle),
			"wasInsecureSkipTLSVerify", o.insecureSkipTLSVerify)
		return nil
	})
}

// FieldManager is the field manager the adapter writes APIServices and Secrets as.
const FieldManager = "saturation-adapter"

// describe names where an APIService routes: "namespace/name", or "kube-apiserver
// (local)" for one without spec.service.
func describe(s *Service) string {
	if s == nil {
		return "kube-apiserver (local)"
	}
	return s.String()
}
