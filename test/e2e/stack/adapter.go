package stack

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
)

// Adapter identity and registration names.
const (
	AdapterNamespace = "saturation-adapter"
	AdapterService   = "saturation-adapter"
	AdapterUser      = "saturation-adapter"
	APIServiceName   = "v1beta1.external.metrics.k8s.io"
)

// AdapterOptions configure the adapter process.
type AdapterOptions struct {
	// Binary is bin/adapter.
	Binary string
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

// setupAdapterRBAC grants the adapter's user what an aggregated external-metrics server
// needs: read pods and HPAs, delegate authentication and authorization, read the
// extension-apiserver-authentication ConfigMap.
func setupAdapterRBAC(ctx context.Context, c *controlplane.Cluster) error {
	rbac := c.Client.RbacV1()
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: AdapterUser}}
	objs := []func() error{
		func() error {
			_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "saturation-adapter"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"get", "list", "watch"}},
					{APIGroups: []string{"autoscaling"}, Resources: []string{"horizontalpodautoscalers"}, Verbs: []string{"get", "list", "watch"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "saturation-adapter"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "saturation-adapter"},
				Subjects:   subject,
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "saturation-adapter:system:auth-delegator"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
				Subjects:   subject,
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "saturation-adapter-auth-reader"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
				Subjects:   subject,
			}, metav1.CreateOptions{})
			return err
		},
		// The bootstrap policy already lets the HPA controller read external metrics; this
		// binding states it explicitly, as a deployment of the adapter would.
		func() error {
			_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "saturation-adapter:external-metrics-reader"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"external.metrics.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "saturation-adapter:hpa-external-metrics"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "saturation-adapter:external-metrics-reader"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-system", Name: "horizontal-pod-autoscaler"}},
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// StartAdapter starts the adapter binary with a serving certificate from the cluster's
// serving CA and registers it as v1beta1.external.metrics.k8s.io behind an ExternalName
// Service named localhost, with that CA as caBundle. It waits until the APIService is
// Available.
func StartAdapter(ctx context.Context, c *controlplane.Cluster, o AdapterOptions) (*Adapter, error) {
	if err := c.CreateNamespace(ctx, AdapterNamespace); err != nil {
		return nil, err
	}
	if err := setupAdapterRBAC(ctx, c); err != nil {
		return nil, fmt.Errorf("adapter RBAC: %w", err)
	}
	kubeconfig, err := c.UserKubeconfig("adapter", AdapterUser)
	if err != nil {
		return nil, err
	}
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
	args = append(args, o.ExtraArgs...)
	proc, err := controlplane.StartProcess(c.Dir, "adapter", o.Binary, args, nil)
	if err != nil {
		return nil, err
	}
	a := &Adapter{Process: proc, Port: port}
	fail := func(err error) (*Adapter, error) {
		proc.Stop(5 * time.Second)
		return nil, fmt.Errorf("%w\n----- adapter log -----\n%s", err, proc.Tail(4000))
	}

	_, err = c.Client.CoreV1().Services(AdapterNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: AdapterService},
		Spec: corev1.ServiceSpec{
			Type:         corev1.ServiceTypeExternalName,
			ExternalName: "localhost",
			Ports:        []corev1.ServicePort{{Name: "https", Port: int32(port)}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fail(err)
	}
	agg, err := aggregator.NewForConfig(c.Config)
	if err != nil {
		return fail(err)
	}
	p := int32(port)
	_, err = agg.ApiregistrationV1().APIServices().Create(ctx, &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
		Spec: apiregv1.APIServiceSpec{
			Service:              &apiregv1.ServiceReference{Namespace: AdapterNamespace, Name: AdapterService, Port: &p},
			Group:                "external.metrics.k8s.io",
			Version:              "v1beta1",
			CABundle:             c.ServingCA.CertPEM,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fail(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if exited, werr := proc.Exited(); exited {
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
		return fail(fmt.Errorf("APIService %s not Available (last: %s): %w", APIServiceName, last, err))
	}
	return a, nil
}
