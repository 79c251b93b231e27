package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// adapterDNSNames are the names the aggregator verifies the adapter by (the first)
// and its cluster.local form.
var adapterDNSNames = []string{
	stack.AdapterService + "." + stack.AdapterNamespace + ".svc",
	stack.AdapterService + "." + stack.AdapterNamespace + ".svc.cluster.local",
}

// kustomizeCertManager: docs/install.md's own-kustomization block with manifests/cert-manager,
// without cert-manager: a stand-in (certManagerStandIn) does what cert-manager and its
// cainjector would, and the aggregator verifies the adapter with the CA injected.
func (e *installEnv) kustomizeCertManager(t *testing.T) {
	e.requireClean(t)
	ca := e.startCertManagerStandIn(t)
	e.ownKustomizationAs(t, "../manifests/cert-manager")
	e.checkInstalled(t, readmeImage, tlsWant{secret: "saturation-adapter-tls", ca: ca.CertPEM})
	e.uninstallOwnKustomization(t)
}

// helmCertManager: the README's Helm install with tls.mode=certManager (the chart's
// own self-signed CA and Issuer), cert-manager and cainjector stood in for as in
// kustomizeCertManager.
func (e *installEnv) helmCertManager(t *testing.T) {
	e.requireClean(t)
	ca := e.startCertManagerStandIn(t)
	e.helmWith(t, "--set tls.mode=certManager", tlsWant{secret: "saturation-adapter-tls", ca: ca.CertPEM})
}

// helmInsecure: the README's Helm install with the explicit opt-out tls.mode=insecure.
func (e *installEnv) helmInsecure(t *testing.T) {
	e.requireClean(t)
	e.helmWith(t, "--set tls.mode=insecure", tlsWant{insecure: true})
}

// startCertManagerStandIn installs the CRDs and runs certManagerStandIn with a new CA
// until the test ends; it returns the CA.
func (e *installEnv) startCertManagerStandIn(t *testing.T) *controlplane.CA {
	t.Helper()
	e.installCRDs(t)
	ca, err := controlplane.NewCA(t.TempDir(), "cert-manager-ca", "saturation-adapter-ca")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.certManagerStandIn(ctx, t, ca)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ca
}

// helmWith runs the README's Helm install with values added after its image tag,
// checks the install with want, and runs docs/install.md's Helm uninstall.
func (e *installEnv) helmWith(t *testing.T, values string, want tlsWant) {
	t.Helper()
	block := docBlock(t, helmBlock)
	const tag = "--set image.tag=v0.1.0"
	if !strings.Contains(block, tag) {
		t.Fatalf("README Helm block has no %q:\n%s", tag, block)
	}
	e.runBlock(t, strings.Replace(block, tag, tag+" "+values, 1), nil)
	e.checkInstalled(t, readmeImage, want)
	e.runBlock(t, docBlock(t, helmUninstallBlock), nil)
	e.checkUninstalled(t)
}

// ownKustomizationAs runs docs/install.md's own-kustomization block with variant in place of
// the custom-metrics variant it names, waiting for the External metrics APIService only.
func (e *installEnv) ownKustomizationAs(t *testing.T, variant string) {
	t.Helper()
	block := docBlock(t, ownKustomizationBlock)
	if !strings.Contains(block, "../manifests/custom-metrics") {
		t.Fatalf("docs/install.md's own-kustomization block does not name ../manifests/custom-metrics:\n%s", block)
	}
	block = strings.ReplaceAll(block, "../manifests/custom-metrics", variant)
	block = strings.ReplaceAll(block, " apiservice/v1beta2.custom.metrics.k8s.io", "") // not in this variant
	e.runBlock(t, block, nil)
}

var certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// certManagerStandIn does, in the adapter's namespace until ctx ends, what cert-manager
// and cainjector would do for the cert-manager variant: for each Certificate, a key
// pair for its spec.dnsNames signed by ca, written as cert-manager writes it (Secret
// spec.secretName, type kubernetes.io/tls, keys tls.crt, tls.key and ca.crt); for each
// APIService annotated cert-manager.io/inject-ca-from: <namespace>/<certificate>, that
// Certificate's Secret's ca.crt as caBundle. The variant's Issuers (a self-signed
// bootstrap and the CA issuer) are left alone: ca stands for the CA they would make.
func (e *installEnv) certManagerStandIn(ctx context.Context, t *testing.T, ca *controlplane.CA) {
	dyn, err := dynamic.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Error(err)
		return
	}
	agg, err := aggregator.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Error(err)
		return
	}
	dir := t.TempDir()
	secrets := e.cluster.Client.CoreV1().Secrets(stack.AdapterNamespace)
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		certs, err := dyn.Resource(certificates).Namespace(stack.AdapterNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		secretOf := map[string]string{}
		for _, c := range certs.Items {
			name, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
			secretOf[stack.AdapterNamespace+"/"+c.GetName()] = name
			if _, err := secrets.Get(ctx, name, metav1.GetOptions{}); err == nil {
				continue
			}
			hosts, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
			if len(hosts) == 0 { // the bootstrap CA's Certificate (isCA, no names)
				continue
			}
			kp, err := ca.Serving(dir, c.GetName(), hosts, nil)
			if err != nil {
				t.Error(err)
				return true, nil
			}
			_, _ = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"cert-manager.io/certificate-name": c.GetName()}},
				Type:       corev1.SecretTypeTLS,
				Data:       map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": ca.CertPEM},
			}, metav1.CreateOptions{})
		}
		apis, err := agg.ApiregistrationV1().APIServices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, a := range apis.Items {
			name, ok := secretOf[a.Annotations["cert-manager.io/inject-ca-from"]]
			if !ok {
				continue
			}
			s, err := secrets.Get(ctx, name, metav1.GetOptions{})
			if err != nil || string(a.Spec.CABundle) == string(s.Data["ca.crt"]) {
				continue
			}
			a.Spec.CABundle = s.Data["ca.crt"]
			_, _ = agg.ApiregistrationV1().APIServices().Update(ctx, &a, metav1.UpdateOptions{}) // a conflict retries next tick
		}
		return false, nil
	})
}

// helmSecret: the README's Helm install with tls.mode=secret, a Secret the user made
// first (kubectl create secret tls) and its CA as tls.secret.caBundle (--set-file).
func (e *installEnv) helmSecret(t *testing.T) {
	e.requireClean(t)
	dir := t.TempDir()
	ca, err := controlplane.NewCA(dir, "user-ca", "user-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Serving(dir, "user-tls", adapterDNSNames, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.run(t, "kubectl create namespace saturation-adapter", nil)
	e.run(t, "kubectl -n saturation-adapter create secret tls user-tls --cert="+kp.CertFile+" --key="+kp.KeyFile, nil)
	e.helmWith(t, "--set tls.mode=secret --set tls.secret.name=user-tls --set-file tls.secret.caBundle="+ca.CertFile,
		tlsWant{secret: "user-tls", ca: ca.CertPEM})
}

// installCRDs installs testdata/crds for real and waits until they are Established.
func (e *installEnv) installCRDs(t *testing.T) {
	t.Helper()
	e.run(t, "kubectl apply --server-side -f "+filepath.Join(e.e2eDir(), "testdata", "crds"), nil)
	e.run(t, "kubectl wait --for=condition=Established crd --all --timeout=1m", nil)
}
