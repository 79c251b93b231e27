package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
)

// Adapter identity and registration names, as in manifests/.
const (
	AdapterNamespace      = "saturation-adapter"
	AdapterService        = "saturation-adapter"
	AdapterServiceAccount = "saturation-adapter"
	APIServiceName        = "v1beta1.external.metrics.k8s.io"
)

// AdapterManifests are the files of manifests/base applied as they ship: the
// adapter's namespace, ServiceAccount and RBAC, including the managed serving
// certificate's (rbac-tls.yaml). The adapter process then runs with that
// ServiceAccount's token, so the tests exercise the shipped RBAC and nothing more.
var AdapterManifests = []string{"namespace.yaml", "service-account.yaml", "rbac.yaml", "rbac-hpa.yaml", "rbac-tls.yaml"}

// ServingCertSecret is the Secret of the managed serving certificate, as
// manifests/base/deployment.yaml names it (--tls-managed-secret).
const ServingCertSecret = "saturation-adapter-serving-cert"

// AdapterOptions configure the adapter process.
type AdapterOptions struct {
	// Binary is bin/adapter.
	Binary string
	// ManifestsDir is the repository's manifests/base.
	ManifestsDir string
	// ScrapeInterval and ScrapeTimeout are passed as --scrape-interval/--scrape-timeout
	// when non-zero.
	ScrapeInterval, ScrapeTimeout time.Duration
	// ExtraArgs are appended.
	ExtraArgs []string
	// RBACFiles, when set, are applied instead of AdapterManifests (paths, in
	// order): another rendering of the adapter's namespace, ServiceAccount and
	// RBAC, such as the chart's.
	RBACFiles []string
}

// Adapter is the running adapter and its registration.
type Adapter struct {
	Process *controlplane.Process
	Port    int
}

// applyAdapterManifests applies AdapterManifests with kubectl, as a user would,
// and returns a kubeconfig of the adapter's ServiceAccount.
func applyAdapterManifests(ctx context.Context, c *controlplane.Cluster, dir string, files []string) (string, error) {
	if len(files) == 0 {
		for _, f := range AdapterManifests {
			files = append(files, filepath.Join(dir, f))
		}
	}
	for _, f := range files {
		if _, err := c.Kubectl(ctx, "apply", "-f", f); err != nil {
			return "", err
		}
	}
	return c.ServiceAccountKubeconfig(ctx, AdapterNamespace, AdapterServiceAccount)
}

// StartAdapter applies the adapter's manifests (namespace, ServiceAccount, RBAC),
// registers v1beta1.external.metrics.k8s.io behind an ExternalName Service
// named localhost, with no caBundle, and starts the adapter binary as that
// ServiceAccount in the default install's TLS mode: it creates its CA and
// serving certificate in ServingCertSecret and writes the CA into the
// APIService's caBundle, so the aggregator verifies it. It waits until the
// APIService is Available.
func StartAdapter(ctx context.Context, c *controlplane.Cluster, o AdapterOptions) (*Adapter, error) {
	kubeconfig, err := applyAdapterManifests(ctx, c, o.ManifestsDir, o.RBACFiles)
	if err != nil {
		return nil, fmt.Errorf("adapter manifests: %w", err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	// Registered first, as applying the install creates the APIService with the
	// Deployment: the adapter's first certificate sync finds it.
	if err := register(ctx, c, port); err != nil {
		return nil, err
	}
	a, err := startAdapterProcess(c, o, kubeconfig, port)
	if err != nil {
		return nil, err
	}
	if err := a.waitAvailable(ctx, c); err != nil {
		a.Process.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\n----- adapter log -----\n%s", err, a.Process.Tail(4000))
	}
	return a, nil
}

// startAdapterProcess starts bin/adapter on the loopback port.
func startAdapterProcess(c *controlplane.Cluster, o AdapterOptions, kubeconfig string, port int) (*Adapter, error) {
	args := []string{
		"--secure-port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		// The generic server's self-signed fallback pair goes here, unused.
		"--cert-dir=" + filepath.Join(c.Dir, "adapter-certs"),
		"--tls-managed-secret=" + ServingCertSecret,
		"--adapter-namespace=" + AdapterNamespace,
		"--apiservices=" + APIServiceName,
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
	}
	if o.ScrapeInterval > 0 {
		args = append(args, "--scrape-interval="+o.ScrapeInterval.String())
	}
	if o.ScrapeTimeout > 0 {
		args = append(args, "--scrape-timeout="+o.ScrapeTimeout.String())
	}
	proc, err := controlplane.StartProcess(c.Dir, "adapter", o.Binary, append(args, o.ExtraArgs...), nil)
	if err != nil {
		return nil, err
	}
	return &Adapter{Process: proc, Port: port}, nil
}

// register creates the ExternalName Service (the aggregator dials localhost:port
// and verifies the certificate for saturation-adapter.saturation-adapter.svc)
// and the APIService, without caBundle: the adapter writes it.
func register(ctx context.Context, c *controlplane.Cluster, port int) error {
	_, err := c.Client.CoreV1().Services(AdapterNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: AdapterService},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	agg, err := aggregator.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	_, err = agg.ApiregistrationV1().APIServices().Create(ctx, &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
		Spec: apiregv1.APIServiceSpec{
			Service:              &apiregv1.ServiceReference{Namespace: AdapterNamespace, Name: AdapterService, Port: ptr.To(int32(port))},
			Group:                "external.metrics.k8s.io",
			Version:              "v1beta1",
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}, metav1.CreateOptions{})
	return err
}

// waitAvailable waits until the aggregator reports the APIService Available:
// it reached the adapter and verified its certificate with the caBundle the
// adapter published.
func (a *Adapter) waitAvailable(ctx context.Context, c *controlplane.Cluster) error {
	agg, err := aggregator.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if exited, werr := a.Process.Exited(); exited {
			return false, fmt.Errorf("adapter exited: %v", werr) //nolint:errorlint // werr is nil after a clean exit
		}
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if len(s.Spec.CABundle) == 0 {
			last = "no caBundle published yet"
			return false, nil
		}
		for _, cond := range s.Status.Conditions {
			if cond.Type == apiregv1.Available {
				last = cond.Reason + ": " + cond.Message
				return cond.Status == apiregv1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not Available (last: %s): %w", APIServiceName, last, err)
	}
	return nil
}
