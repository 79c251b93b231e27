package stack

import (
	"context"
	"fmt"
	"net"
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

// AdapterManifests are the files of manifests/ applied as they ship: the
// adapter's namespace, ServiceAccount and RBAC. The adapter process then runs
// with that ServiceAccount's token, so the tests exercise the shipped RBAC and
// nothing more.
var AdapterManifests = []string{"namespace.yaml", "service-account.yaml", "rbac.yaml", "rbac-hpa.yaml"}

// AdapterOptions configure the adapter process.
type AdapterOptions struct {
	// Binary is bin/adapter.
	Binary string
	// ManifestsDir is the repository's manifests/.
	ManifestsDir string
	// ScrapeInterval and ScrapeTimeout are passed as --scrape-interval/--scrape-timeout
	// when non-zero.
	ScrapeInterval, ScrapeTimeout time.Duration
	// ExtraArgs are appended.
	ExtraArgs []string
}

// Adapter is the running adapter and its registration.
type Adapter struct {
	Process *controlplane.Process
	Port    int
}

// applyAdapterManifests applies AdapterManifests with kubectl, as a user would,
// and returns a kubeconfig of the adapter's ServiceAccount.
func applyAdapterManifests(ctx context.Context, c *controlplane.Cluster, dir string) (string, error) {
	for _, f := range AdapterManifests {
		if _, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(dir, f)); err != nil {
			return "", err
		}
	}
	return c.ServiceAccountKubeconfig(ctx, AdapterNamespace, AdapterServiceAccount)
}

// StartAdapter applies the adapter's manifests (namespace, ServiceAccount, RBAC),
// starts the adapter binary as that ServiceAccount with a serving certificate
// from the cluster's serving CA, and registers it as v1beta1.external.metrics.k8s.io
// behind an ExternalName Service named localhost, with that CA as caBundle. It
// waits until the APIService is Available.
func StartAdapter(ctx context.Context, c *controlplane.Cluster, o AdapterOptions) (*Adapter, error) {
	kubeconfig, err := applyAdapterManifests(ctx, c, o.ManifestsDir)
	if err != nil {
		return nil, fmt.Errorf("adapter manifests: %w", err)
	}
	a, err := startAdapterProcess(c, o, kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := a.register(ctx, c); err != nil {
		a.Process.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\n----- adapter log -----\n%s", err, a.Process.Tail(4000))
	}
	return a, nil
}

// startAdapterProcess starts bin/adapter on a free loopback port.
func startAdapterProcess(c *controlplane.Cluster, o AdapterOptions, kubeconfig string) (*Adapter, error) {
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	// The aggregator dials localhost:<port> but verifies the certificate for the
	// Service's DNS name.
	svcDNS := AdapterService + "." + AdapterNamespace + ".svc"
	serving, err := c.ServingCA.Serving(filepath.Join(c.Dir, "pki"), "adapter", []string{"localhost", svcDNS}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	args := []string{
		"--secure-port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + serving.CertFile,
		"--tls-private-key-file=" + serving.KeyFile,
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

// register creates the ExternalName Service and the APIService with the serving
// CA as caBundle, and waits until the aggregator reports it Available.
func (a *Adapter) register(ctx context.Context, c *controlplane.Cluster) error {
	_, err := c.Client.CoreV1().Services(AdapterNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: AdapterService},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(a.Port)}},
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
			Service:              &apiregv1.ServiceReference{Namespace: AdapterNamespace, Name: AdapterService, Port: ptr.To(int32(a.Port))},
			Group:                "external.metrics.k8s.io",
			Version:              "v1beta1",
			CABundle:             c.ServingCA.CertPEM,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if exited, werr := a.Process.Exited(); exited {
			return false, fmt.Errorf("adapter exited: %v", werr)
		}
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
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
