// Package controlplane runs a throwaway Kubernetes control plane on loopback for end-to-end
// tests: etcd, kube-apiserver (with the front-proxy settings API aggregation needs) and
// kube-controller-manager, all built from source by `make e2e-tools`. There are no nodes and
// no scheduler; a node agent (package nodeagent) stands in for the kubelet.
package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// Options configure a control plane.
type Options struct {
	// ToolsDir holds kube-apiserver, kube-controller-manager, kubectl and etcd.
	ToolsDir string
	// Dir is the working directory for certificates, data and logs; it must exist.
	Dir string
	// HPASyncPeriod is the controller manager's --horizontal-pod-autoscaler-sync-period
	// (default 15 s, the upstream default).
	HPASyncPeriod time.Duration
	// HPADownscaleStabilization is --horizontal-pod-autoscaler-downscale-stabilization
	// (default 5 m upstream); HPAs may override it with behavior.
	HPADownscaleStabilization time.Duration
	// ServiceCIDR is --service-cluster-ip-range (default 10.96.0.0/24). Nothing serves
	// the default range: ClusterIPs in it are never dialed, APIServices point at
	// ExternalName Services (the stack's is localhost) and the aggregator routes to those.
	// A loopback range (127.a.b.0/24) lets a stand-in kube-proxy (nodeagent's
	// Options.Services) serve each ClusterIP, so an APIService's ClusterIP Service routes
	// to its pods as on a real cluster, on loopback only.
	ServiceCIDR string
	// ExtraControllers are kube-controller-manager controllers to run besides
	// Controllers, e.g. namespace-controller (a deleted Namespace empties and goes) and
	// root-ca-certificate-publisher-controller (the kube-root-ca.crt ConfigMap every
	// pod's service-account volume reads).
	ExtraControllers []string
	// ExtraAPIServerFlags and ExtraControllerManagerFlags are appended to the defaults.
	ExtraAPIServerFlags, ExtraControllerManagerFlags []string
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)
}

// Controllers are the kube-controller-manager controllers the tests need: Deployments make
// ReplicaSets make Pods (which need ServiceAccounts), the HPA scales, the garbage
// collector removes orphans.
var Controllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"horizontal-pod-autoscaler-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
}

// Cluster is a running control plane.
type Cluster struct {
	Dir string
	// URL is the API server's https URL on 127.0.0.1.
	URL string
	// ServingCA signed the API server's serving certificate; use it for other servers the
	// API server must trust (an aggregated API server's caBundle).
	ServingCA *CA
	// ClientCA signs client certificates the API server accepts.
	ClientCA *CA
	// FrontProxyCA signs the aggregator's proxy client certificate.
	FrontProxyCA *CA
	// AdminKubeconfig is a kubeconfig for a system:masters user.
	AdminKubeconfig string
	// Config and Client are the admin's.
	Config *rest.Config
	Client kubernetes.Interface

	toolsDir string
	procs    []*Process
	logf     func(string, ...any)
	// apiArgs are kube-apiserver's arguments, for RestartAPIServer.
	apiArgs  []string
	restarts int
}

// Start generates certificates and starts etcd, kube-apiserver and kube-controller-manager.
// On error everything already started is stopped. The caller must call Stop.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.HPASyncPeriod == 0 {
		o.HPASyncPeriod = 15 * time.Second
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/24"
	}
	if o.HPADownscaleStabilization == 0 {
		o.HPADownscaleStabilization = 5 * time.Minute
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if _, err := os.Stat(filepath.Join(o.ToolsDir, b)); err != nil {
			return nil, fmt.Errorf("control-plane binary missing (run `make e2e-tools`): %w", err)
		}
	}
	c = &Cluster{Dir: o.Dir, toolsDir: o.ToolsDir, logf: o.Logf}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	pki := filepath.Join(o.Dir, "pki")
	certs, err := c.makeCerts(pki)
	if err != nil {
		return nil, err
	}
	etcdURL, err := c.startEtcd(o)
	if err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, o, pki, certs, etcdURL); err != nil {
		return nil, err
	}
	if err := c.startControllerManager(o, pki, certs); err != nil {
		return nil, err
	}
	return c, nil
}

// clusterCerts are the key pairs and files the control plane starts with.
type clusterCerts struct {
	apiServing, proxyClient *KeyPair
	saKey, saPub            string
}

// makeCerts creates the three CAs (serving, client, front proxy), the API
// server's serving certificate, the aggregator's proxy client certificate and
// the service-account signing key.
func (c *Cluster) makeCerts(pki string) (clusterCerts, error) {
	var certs clusterCerts
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return certs, err
	}
	var err error
	if c.ServingCA, err = NewCA(pki, "serving-ca", "e2e-serving-ca"); err != nil {
		return certs, err
	}
	if c.ClientCA, err = NewCA(pki, "client-ca", "e2e-client-ca"); err != nil {
		return certs, err
	}
	if c.FrontProxyCA, err = NewCA(pki, "front-proxy-ca", "e2e-front-proxy-ca"); err != nil {
		return certs, err
	}
	if certs.apiServing, err = c.ServingCA.Serving(pki, "apiserver", []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return certs, err
	}
	if certs.proxyClient, err = c.FrontProxyCA.Client(pki, "front-proxy-client", "front-proxy-client"); err != nil {
		return certs, err
	}
	certs.saKey, certs.saPub, err = writeServiceAccountKey(pki)
	return certs, err
}

// startEtcd starts a single-member etcd on free loopback ports and returns its
// client URL once it accepts connections.
func (c *Cluster) startEtcd(o Options) (string, error) {
	etcdClient, err := FreePort()
	if err != nil {
		return "", err
	}
	etcdPeer, err := FreePort()
	if err != nil {
		return "", err
	}
	clientURL := "http://127.0.0.1:" + itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + itoa(etcdPeer)
	etcd, err := c.start("etcd", []string{
		"--name=e2e",
		"--data-dir=" + filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=e2e=" + peerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	})
	if err != nil {
		return "", err
	}
	if err := waitTCP(etcd, fmt.Sprintf("127.0.0.1:%d", etcdClient), 30*time.Second); err != nil {
		return "", err
	}
	o.Logf("etcd up on %s", clientURL)
	return clientURL, nil
}

// startAPIServer starts kube-apiserver with RBAC, service-account tokens and the
// front-proxy settings API aggregation needs, writes the admin kubeconfig and
// client, and waits for /readyz.
func (c *Cluster) startAPIServer(ctx context.Context, o Options, pki string, certs clusterCerts, etcdURL string) error {
	apiPort, err := FreePort()
	if err != nil {
		return err
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + itoa(apiPort),
		"--tls-cert-file=" + certs.apiServing.CertFile,
		"--tls-private-key-file=" + certs.apiServing.KeyFile,
		"--client-ca-file=" + c.ClientCA.CertFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + certs.saPub,
		"--service-account-signing-key-file=" + certs.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--api-audiences=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + o.ServiceCIDR,
		// The kubernetes Service's endpoints would be the loopback advertise address,
		// which endpoint validation rejects; nothing in the tests needs them.
		"--endpoint-reconciler-type=none",
		// API aggregation: the aggregator authenticates to extension servers with the
		// proxy client certificate and passes the user in request headers.
		"--requestheader-client-ca-file=" + c.FrontProxyCA.CertFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + certs.proxyClient.CertFile,
		"--proxy-client-key-file=" + certs.proxyClient.KeyFile,
		// The aggregator dials an APIService's Service: its ExternalName, or its ClusterIP
		// (see Options.ServiceCIDR). Routing to the Service's EndpointSlices instead is no
		// option here: EndpointSlice validation rejects loopback addresses, the only pod
		// IPs there are.
		"--enable-aggregator-routing=false",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	c.apiArgs = append(apiArgs, o.ExtraAPIServerFlags...)
	apiserver, err := c.start("kube-apiserver", c.apiArgs)
	if err != nil {
		return err
	}
	admin, err := c.ClientCA.Client(pki, "admin", "e2e-admin", "system:masters")
	if err != nil {
		return err
	}
	c.AdminKubeconfig = filepath.Join(o.Dir, "admin.kubeconfig")
	if err := c.writeKubeconfig(c.AdminKubeconfig, "e2e-admin", admin); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 100, 200
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if err := c.waitReady(ctx, apiserver); err != nil {
		return err
	}
	o.Logf("kube-apiserver ready at %s", c.URL)
	return nil
}

// startControllerManager starts kube-controller-manager with the Controllers and
// Options.ExtraControllers, each acting as its own service account, and a short HPA
// sync period.
func (c *Cluster) startControllerManager(o Options, pki string, certs clusterCerts) error {
	kcm, err := c.ClientCA.Client(pki, "kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	kcmKubeconfig := filepath.Join(o.Dir, "kube-controller-manager.kubeconfig")
	if err := c.writeKubeconfig(kcmKubeconfig, "system:kube-controller-manager", kcm); err != nil {
		return err
	}
	kcmPort, err := FreePort()
	if err != nil {
		return err
	}
	controllers := append(slices.Clone(Controllers), o.ExtraControllers...)
	kcmArgs := []string{
		"--kubeconfig=" + kcmKubeconfig,
		"--authentication-kubeconfig=" + kcmKubeconfig,
		"--authorization-kubeconfig=" + kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + itoa(kcmPort),
		"--controllers=" + strings.Join(controllers, ","),
		// Each controller acts as its own service account, so the HPA controller reads
		// external.metrics.k8s.io with the rights the bootstrap RBAC policy gives it.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + certs.saKey,
		"--root-ca-file=" + c.ServingCA.CertFile,
		"--leader-elect=false",
		"--horizontal-pod-autoscaler-sync-period=" + o.HPASyncPeriod.String(),
		"--horizontal-pod-autoscaler-downscale-stabilization=" + o.HPADownscaleStabilization.String(),
		"--v=2",
	}
	kcmProc, err := c.start("kube-controller-manager", append(kcmArgs, o.ExtraControllerManagerFlags...))
	if err != nil {
		return err
	}
	if err := waitTCP(kcmProc, fmt.Sprintf("127.0.0.1:%d", kcmPort), 60*time.Second); err != nil {
		return err
	}
	o.Logf("kube-controller-manager up (controllers %s)", strings.Join(controllers, ","))
	return nil
}

func (c *Cluster) start(name string, args []string) (*Process, error) {
	p, err := StartProcess(c.Dir, name, filepath.Join(c.toolsDir, name), args, nil)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// RestartAPIServer stops kube-apiserver, leaves it down for down, starts it again with
// the same arguments (etcd keeps the data) and waits until it is ready: what a control
// plane upgrade or a crash does to its clients' watches.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	i := slices.IndexFunc(c.procs, func(p *Process) bool { return strings.HasPrefix(p.Name, "kube-apiserver") })
	if i < 0 {
		return fmt.Errorf("no kube-apiserver process")
	}
	c.procs[i].Stop(10 * time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	c.restarts++
	p, err := StartProcess(c.Dir, fmt.Sprintf("kube-apiserver-%d", c.restarts), filepath.Join(c.toolsDir, "kube-apiserver"), c.apiArgs, nil)
	if err != nil {
		return err
	}
	c.procs[i] = p
	return c.waitReady(ctx, p)
}

// Processes lists the control-plane processes in start order.
func (c *Cluster) Processes() []*Process { return c.procs }

// Stop stops the processes in reverse start order.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].Stop(10 * time.Second)
	}
	c.procs = nil
}

// waitReady polls /readyz until the API server answers ok.
func (c *Cluster) waitReady(ctx context.Context, p *Process) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if exited, werr := p.Exited(); exited {
			return false, fmt.Errorf("kube-apiserver exited: %v\n%s", werr, p.Tail(6000)) //nolint:errorlint // werr is nil after a clean exit
		}
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = err.Error() + " " + string(body)
			return false, nil
		}
		return string(body) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready (last: %s): %w", last, err)
	}
	return nil
}

// writeKubeconfig writes a kubeconfig for user with client certificate kp.
func (c *Cluster) writeKubeconfig(path, user string, kp *KeyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.ServingCA.CertPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, path)
}

// UserKubeconfig issues a client certificate for user (in groups) and writes a kubeconfig
// for it to Dir/<name>.kubeconfig.
func (c *Cluster) UserKubeconfig(name, user string, groups ...string) (string, error) {
	kp, err := c.ClientCA.Client(filepath.Join(c.Dir, "pki"), name, user, groups...)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, name+".kubeconfig")
	return path, c.writeKubeconfig(path, user, kp)
}

// ServiceAccountKubeconfig requests a token for the ServiceAccount namespace/name
// (TokenRequest API, valid for a day) and writes a kubeconfig that uses it to
// Dir/<namespace>-<name>.kubeconfig: a process then acts exactly as a pod of that
// ServiceAccount would, with the RBAC bound to it.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthorityData: c.ServingCA.CertPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(c.Dir, namespace+"-"+name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// Kubectl runs the built kubectl against the cluster as admin and returns its stdout; the
// error includes stderr.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.toolsDir, "kubectl"), append([]string{"--kubeconfig=" + c.AdminKubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// CreateNamespace creates a namespace and waits for its default ServiceAccount, without
// which the ServiceAccount admission plugin rejects pods.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// Logs returns the tail of each control-plane process log, for failure reports.
func (c *Cluster) Logs(n int64) string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "----- %s (%s) -----\n%s\n", p.Name, p.LogFile, p.Tail(n))
	}
	return b.String()
}
