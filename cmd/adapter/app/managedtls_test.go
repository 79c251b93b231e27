package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/apiservice"
	"github.com/saturation-adapter/saturation-adapter/pkg/servingcert"
)

// The managed serving certificate in the assembled server: with
// --tls-managed-secret and --adapter-namespace set, the server is
// verified with the caBundle written into the APIService, for the Service's
// name, as the aggregator verifies it; a rotation is served without a restart.
func TestAssembledServerWithManagedCertificate(t *testing.T) {
	pki := newTestPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// Never contacted: the test replaces the client with a fake one.
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Server.SecureServing.Listener = ln
	o.Server.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	o.Server.SecureServing.ServerCert.CertDirectory = dir
	o.Server.Authentication.RemoteKubeConfigFileOptional = true
	o.Server.Authentication.ClientCert.ClientCA = pki.caFile
	o.Server.Authorization.RemoteKubeConfigFileOptional = true
	o.Kubeconfig = kubeconfig
	// What --adapter-namespace=saturation-adapter and
	// --tls-managed-secret=saturation-adapter-tls give.
	o.Identity.Namespace = "saturation-adapter"
	o.ManagedTLS.SecretName = "saturation-adapter-tls"
	o.Complete()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ManagedTLS == nil || cfg.Self.String() != "saturation-adapter/saturation-adapter" {
		t.Fatalf("Config: ManagedTLS %v, Self %s; want the managed certificate for saturation-adapter/saturation-adapter", cfg.ManagedTLS, cfg.Self)
	}
	client := fake.NewClientset()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{apiservice.Resource: "APIServiceList"},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": apiservice.ExternalMetrics},
			"spec": map[string]any{"group": "external.metrics.k8s.io", "version": "v1beta1", "insecureSkipTLSVerify": true,
				"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
				"service": map[string]any{"namespace": "saturation-adapter", "name": "saturation-adapter", "port": int64(443)}},
		}})
	clk := clocktesting.NewFakeClock(time.Now())
	cfg.Client, cfg.Dynamic, cfg.Clock = client, dyn, clk

	s, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// As the aggregator: the APIService's caBundle, the Service's DNS name and
	// the front-proxy client certificate.
	var lastBody string
	get := func(path string) (*x509.Certificate, error) {
		u, err := dyn.Resource(apiservice.Resource).Get(context.Background(), apiservice.ExternalMetrics, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		b64, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
		bundle, _ := base64.StdEncoding.DecodeString(b64)
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(bundle)
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "saturation-adapter.saturation-adapter.svc", Time: clk.Now,
			Certificates: []tls.Certificate{pki.client},
		}}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + ln.Addr().String() + path)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		lastBody = string(b)
		if resp.StatusCode != http.StatusOK {
			return nil, &statusError{resp.StatusCode}
		}
		return resp.TLS.PeerCertificates[0], nil
	}
	deadline := time.Now().Add(30 * time.Second)
	var first *x509.Certificate
	for first, err = get("/readyz"); err != nil; first, err = get("/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz verifying with the APIService's caBundle: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The ownership check ran and says the APIService routes here.
	want := `saturation_adapter_apiservice_owned{apiservice="v1beta1.external.metrics.k8s.io"} 1`
	for {
		if _, err := get("/metrics"); err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		if strings.Contains(lastBody, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", want, lastBody)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Two thirds of a year later the certificate is renewed, without a restart.
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the certificate controller is not running")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(servingcert.DefaultServingValidity*2/3 + 24*time.Hour)
	for {
		got, err := get("/livez")
		if err != nil {
			t.Fatalf("GET /livez during the rotation: %v", err)
		}
		if got.SerialNumber.Cmp(first.SerialNumber) != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the renewed certificate was not served")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }
