package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	externalmetrics "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"

	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/nodeagent"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// The README's install names: its example image and version, and the emulated vLLM
// pods its debug commands ask about (<ns>, the example HPA's Deployment and labels).
const (
	readmeImage       = "registry.example.com/saturation-adapter:v0.1.0"
	devImage          = "saturation-adapter:dev" // manifests/ as they ship
	llmNamespace      = "llm"
	llmWaiting        = 2
	llmSaturation     = "400m" // llmWaiting / the default --queue-depth-set-point 5
	servingCertSecret = "saturation-adapter-serving-cert"
)

// installBlocks are the documented blocks TestInstall runs as written
// (TestReadmeCommands checks the tables in test/e2e/README.md against it).
var installBlocks = []docRef{
	saveSpecBlock, releaseBlock, devApplyBlock, devDeleteBlock, helmBlock, debugBlock, uninstallBlock, helmUninstallBlock, ownKustomizationBlock,
	readmeHelmBlock, readmeApplyBlock, readmeWaitBlock, verifyVersionBlock, verifyChecksumsBlock,
	customMetricsBlock, troubleshootingCheckBlock, troubleshootingDeleteBlock, migrationStockBlock, migrationSaveBlock,
	migrationCheckBlock, migrationDescribeBlock, upgradingCheckBlock, upgradingPatchBlock,
}

var (
	// The README's install of a published release (PublishedRelease runs them against
	// loopback stand-ins for ghcr.io and GitHub's downloads).
	readmeHelmBlock      = docRef{"README.md", "Install", "helm install"}
	readmeApplyBlock     = docRef{"README.md", "Install", "kubectl apply -f"}
	readmeWaitBlock      = docRef{"README.md", "Install", "kubectl wait"}
	verifyVersionBlock   = docRef{"docs/install.md", "Verify before installing", "VERSION="}
	verifyChecksumsBlock = docRef{"docs/install.md", "Verify before installing", "curl"}
	// A release built from the checkout (docs/install.md's development section).
	releaseBlock          = docRef{"docs/install.md", "Development: building a release from source", "make release"}
	devApplyBlock         = docRef{"docs/install.md", "Development: building a release from source", "kubectl apply -f dist/"}
	devDeleteBlock        = docRef{"docs/install.md", "Development: building a release from source", "kubectl delete -f dist/"}
	helmBlock             = docRef{"docs/install.md", "Development: building a release from source", "helm install saturation-adapter charts/"}
	debugBlock            = docRef{"README.md", "Check it", "kubectl get --raw"}
	saveSpecBlock         = docRef{"docs/install.md", "Before you install", "kubectl get apiservice"}
	ownKustomizationBlock = docRef{"docs/install.md", "Your own kustomization", "mkdir -p my-install"}
	uninstallBlock        = docRef{"docs/install.md", "Uninstall", "kubectl delete apiservice"}
	helmUninstallBlock    = docRef{"docs/install.md", "Uninstall", "helm uninstall"}
	customMetricsBlock    = docRef{"docs/concepts.md", "Per-pod values (`custom.metrics.k8s.io`)", "kubectl apply -f manifests/rendered/custom-metrics.yaml"}

	troubleshootingCheckBlock  = docRef{"docs/troubleshooting.md", "Troubleshooting", "kubectl get apiservice"}
	troubleshootingDeleteBlock = docRef{"docs/troubleshooting.md", "Uninstall or namespace deletion hangs", "kubectl delete apiservice"}
	migrationStockBlock        = docRef{"docs/migration.md", "1. Take stock", "# Who owns"}
	migrationSaveBlock         = docRef{"docs/migration.md", "2. Keep the way back", "kubectl get apiservice"}
	migrationCheckBlock        = docRef{"docs/migration.md", "4. Install saturation-adapter", "kubectl wait"}
	migrationDescribeBlock     = docRef{"docs/migration.md", "5. Move HPAs one by one", "kubectl describe hpa"}
	upgradingCheckBlock        = docRef{"docs/upgrading.md", "To the verified-TLS install (from `insecureSkipTLSVerify: true`)", "kubectl get apiservice"}
	upgradingPatchBlock        = docRef{"docs/upgrading.md", "To the verified-TLS install (from `insecureSkipTLSVerify: true`)", "kubectl patch apiservice"}
)

// TestInstall follows the documented install (the README's, and docs/install.md) on a
// local control plane, as a new user would: each documented block runs as written,
// through bash, in a copy of this checkout (tracked and untracked files, as a clone has
// them), with the built kubectl and helm on PATH and KUBECONFIG naming the cluster. The
// only edits are the documents' own placeholders (<ns>, <name>) and, where a subtest
// says so, the variant a block names or values added to the Helm install. Around the
// install it runs the checks of docs/troubleshooting.md, docs/migration.md and
// docs/upgrading.md that read or repair a live install.
//
// The adapter really runs as its Deployment's pods: the node agent runs the image the
// README installs (registry.example.com/saturation-adapter:v0.1.0; saturation-adapter:dev
// for manifests/ as shipped) as bin/adapter with the container's args, env, user and
// volumes, its service-account token among them at
// /var/run/secrets/kubernetes.io/serviceaccount in a private mount namespace, so
// rest.InClusterConfig and the namespace lookup are the in-cluster ones
// (nodeagent/sandbox.go); the agent adds --bind-address=$(POD_IP), as the pod network
// namespace it cannot create would. The aggregator reaches the pods through the
// Service's ClusterIP, a loopback address that the agent proxies to the Ready pods as
// kube-proxy would (nodeagent/services.go), and verifies TLS with the caBundle the
// adapter wrote itself (self-managed), the one cainjector would inject (cert-manager,
// stood in for by certManagerStandIn) or the one given (the chart's secret mode), or
// skips it (insecure). Each live subtest ends with the documented uninstall and checks
// that nothing is left and discovery answers.
//
// The Prometheus Operator cannot run here: the monitoring objects, and every other
// rendering (each kustomization, helm template per TLS mode and option), are applied
// with server-side dry-run against the real CRDs (testdata/crds).
func TestInstall(t *testing.T) {
	t.Parallel()
	e := startInstallEnv(t)
	t.Run("KustomizeRelease", e.kustomizeRelease)
	t.Run("KustomizeCustomMetrics", e.kustomizeCustomMetrics)
	t.Run("KustomizeAsShipped", e.kustomizeAsShipped)
	t.Run("KustomizeInsecure", e.kustomizeInsecure)
	t.Run("KustomizeCertManager", e.kustomizeCertManager)
	t.Run("Helm", e.helm)
	t.Run("HelmSecret", e.helmSecret)
	t.Run("HelmCertManager", e.helmCertManager)
	t.Run("HelmInsecure", e.helmInsecure)
	t.Run("PublishedRelease", e.publishedRelease)
	t.Run("DryRun", e.dryRun)
}

type installEnv struct {
	cluster *controlplane.Cluster
	// repo is the copy of the checkout the commands run in.
	repo string
	// env is the commands' environment.
	env []string
	dir string
	// adapters runs the adapter's pods.
	adapters *nodeagent.Agent
	// registry is a loopback OCI registry (host:port) standing in for ghcr.io.
	registry string
}

func startInstallEnv(t *testing.T) *installEnv {
	tools, bin, err := stack.DirsFromEnv()
	if err != nil {
		t.Skip(err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("TestInstall runs the adapter's pods in private mount namespaces (unshare, mount): it needs root")
	}
	helm := os.Getenv("SATURATION_ADAPTER_HELM")
	if helm == "" {
		t.Fatal("SATURATION_ADAPTER_HELM is not set: run through `make test-e2e`, which builds helm into .cache/bin")
	}
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logf := func(f string, args ...any) { t.Logf(time.Now().Format("15:04:05.000 ")+f, args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The adapter's pods on a leased subnet n, and Service ClusterIPs on loopback in
	// 127.254.n.0/24, so that no concurrent test or run meets either. Released after
	// the agents stop (cleanups run last-in first-out).
	lease, err := nodeagent.LeaseSubnet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Release)
	c, err := controlplane.Start(ctx, controlplane.Options{
		ToolsDir: tools, Dir: dir, Logf: logf, HPASyncPeriod: 5 * time.Second,
		ServiceCIDR:      fmt.Sprintf("127.254.%d.0/24", lease.Subnet),
		ExtraControllers: []string{"namespace-controller", "root-ca-certificate-publisher-controller"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	apiURL, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	adapter := nodeagent.Engine{Binary: filepath.Join(bin, "adapter"), Args: []string{"--bind-address=$(POD_IP)"}, InCluster: true}
	// Released images (by digest): from the loopback registry, or from the OCI layouts
	// of the make release the README runs in the checkout's copy, unpacked for this
	// machine's platform and run as the image says (its entrypoint, user 65534).
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	regHost := strings.TrimPrefix(reg.URL, "http://")
	repo := filepath.Join(dir, "repo")
	images := &releaseImages{
		dist: func() string { return filepath.Join(repo, "dist") }, registries: []string{regHost},
		args: adapter.Args, logf: logf,
	}
	t.Cleanup(images.close)
	adapterAgent, err := nodeagent.Start(ctx, nodeagent.Options{
		Client: c.Client, Namespace: stack.AdapterNamespace, LogDir: filepath.Join(dir, "pods"), Logf: logf,
		Subnet: lease.Subnet, APIServer: apiURL.Host, Services: true,
		Engines: map[string]nodeagent.Engine{readmeImage: adapter, devImage: adapter},
		Resolve: images.resolve,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adapterAgent.Stop)
	if err := c.CreateNamespace(ctx, llmNamespace); err != nil {
		t.Fatal(err)
	}
	llmAgent, err := nodeagent.Start(ctx, nodeagent.Options{
		Client: c.Client, Namespace: llmNamespace, LogDir: filepath.Join(dir, "pods"), Logf: logf,
		Engines: map[string]nodeagent.Engine{stubImage: stubEngine(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(llmAgent.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs (dir %s):\n%s", dir, c.Logs(6000))
			for _, f := range podLogs(dir) {
				t.Logf("----- %s -----\n%s", filepath.Base(f), tail(f, 6000))
			}
		}
	})
	// The vLLM pods the README's debug commands ask about: Deployment vllm (the example
	// HPA's target), app=vllm, each with llmWaiting requests waiting.
	vllm := stack.EngineDeployment("vllm", 1, stubImage, fmt.Sprintf("stub-waiting=%d", llmWaiting))
	if _, err := c.Client.AppsV1().Deployments(llmNamespace).Create(ctx, vllm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e := &installEnv{cluster: c, repo: repo, dir: dir, adapters: adapterAgent, registry: regHost}
	e.setupCommands(t, root, tools, helm)
	return e
}

// setupCommands copies the checkout to e.repo and sets the commands' environment: the
// built kubectl and helm first on PATH, KUBECONFIG naming the cluster, and kubectl's and
// helm's caches and configuration in the test's directory.
func (e *installEnv) setupCommands(t *testing.T, root, tools, helm string) {
	t.Helper()
	if err := copyCheckout(root, e.repo); err != nil {
		t.Fatal(err)
	}
	// PATH: the built kubectl and helm first, then what make and the shell need.
	toolBin := filepath.Join(e.dir, "tools")
	if err := os.MkdirAll(toolBin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"kubectl": filepath.Join(tools, "kubectl"), "helm": helm} {
		if err := os.Symlink(target, filepath.Join(toolBin, name)); err != nil {
			t.Fatal(err)
		}
	}
	e.env = append(os.Environ(),
		"PATH="+toolBin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+e.cluster.AdminKubeconfig,
		"KUBECACHEDIR="+filepath.Join(e.dir, "kube-cache"),
		"HELM_CACHE_HOME="+filepath.Join(e.dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(e.dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(e.dir, "helm", "data"),
	)
}

// kustomizeRelease: the default install (self-managed TLS) from `make release`, the
// debug commands, and the uninstall.
func (e *installEnv) kustomizeRelease(t *testing.T) {
	e.requireClean(t)
	// On a cluster where no one owns the API yet, the saved spec is empty.
	e.runBlock(t, docBlock(t, saveSpecBlock), nil)
	if b, err := os.ReadFile(filepath.Join(e.repo, "previous-apiservice-spec.json")); err != nil || len(b) != 0 {
		t.Errorf("previous-apiservice-spec.json = %q, %v; want an empty file on a cluster without the APIService", b, err)
	}
	e.runBlock(t, docBlock(t, releaseBlock), nil)
	e.runBlock(t, docBlock(t, devApplyBlock), nil)
	// The release pins the image by digest: the agent runs the adapter unpacked from the
	// image make release built.
	e.checkInstalled(t, releasedImage(t, filepath.Join(e.repo, "dist")), tlsWant{secret: servingCertSecret})

	// The README's check commands, with an HPA of manifests/examples on the vLLM pods.
	ctx := context.Background()
	if _, err := e.cluster.Kubectl(ctx, "apply", "-n", llmNamespace, "-f", filepath.Join(e.repo, "manifests/examples/hpa-saturation.yaml")); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = e.cluster.Kubectl(ctx, "delete", "-n", llmNamespace, "hpa", "vllm-saturation", "--ignore-not-found")
	}()
	// `kubectl describe hpa <name>` names no namespace: the HPA's goes with its name.
	subst := map[string]string{"<ns>": llmNamespace, "<name>": "-n " + llmNamespace + " vllm-saturation"}
	cmds := shdoc.Commands(docBlock(t, debugBlock))
	if len(cmds) != 3 {
		t.Fatalf("README check block: %d commands, want the metric, the catalog and describe hpa", len(cmds))
	}
	var value externalmetrics.ExternalMetricValueList
	if err := json.Unmarshal(e.run(t, cmds[0], subst), &value); err != nil {
		t.Fatalf("%s: %v", cmds[0], err)
	}
	if len(value.Items) != 1 || value.Items[0].MetricName != "llm_saturation" || value.Items[0].Value.String() != llmSaturation {
		t.Errorf("%s = %+v, want one llm_saturation item of %s (%d waiting, set point 5)", cmds[0], value.Items, llmSaturation, llmWaiting)
	}
	var catalog metav1.APIResourceList
	if err := json.Unmarshal(e.run(t, cmds[1], subst), &catalog); err != nil {
		t.Fatalf("%s: %v", cmds[1], err)
	}
	if !slicesContainsName(catalog.APIResources, "llm_saturation") || !slicesContainsName(catalog.APIResources, "llm_demand_replicas") {
		t.Errorf("%s lists %v, want llm_saturation and llm_demand_replicas", cmds[1], catalog.APIResources)
	}
	// The HPA controller reads the metric through the aggregator and reports it.
	var describe string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		describe = string(e.run(t, cmds[2], subst))
		return strings.Contains(describe, "ValidMetricFound"), nil
	}); err != nil {
		t.Errorf("%s: no ScalingActive ValidMetricFound within 2m:\n%s", cmds[2], describe)
	}
	if !strings.Contains(describe, "llm_saturation") || !strings.Contains(describe, "400m") {
		t.Errorf("%s does not show llm_saturation at 400m:\n%s", cmds[2], describe)
	}
	e.checkDocsOnInstall(t)

	deletions := e.watchDeletions(t)
	e.run(t, shdoc.Commands(docBlock(t, uninstallBlock))[0], nil) // the APIServices first
	e.runBlock(t, docBlock(t, devDeleteBlock), nil)
	e.checkUninstalled(t)
	checkAPIServicesFirst(t, deletions())
}

// checkDocsOnInstall runs the documented blocks that read a live install, on the
// default install with the example HPA (vllm-saturation in llm, its metric already
// valid): troubleshooting's first look, the migration's stock-taking, saved spec,
// install check and HPA check, and the upgrade's TLS check.
func (e *installEnv) checkDocsOnInstall(t *testing.T) {
	t.Helper()
	subst := map[string]string{"<ns>": llmNamespace, "<name>": "vllm-saturation"}
	wantIn := func(ref docRef, out string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s, %q: the output lacks %q:\n%s", ref.File, ref.Section, w, out)
			}
		}
	}
	wantIn(troubleshootingCheckBlock, string(e.runBlock(t, docBlock(t, troubleshootingCheckBlock), subst)),
		"v1beta1.external.metrics.k8s.io", "True", "ValidMetricFound", `"metricName":"llm_saturation"`)
	wantIn(migrationStockBlock, string(e.runBlock(t, docBlock(t, migrationStockBlock), nil)),
		stack.AdapterNamespace+"/"+stack.AdapterService+"\n", llmNamespace+"/vllm-saturation: llm_saturation\n")

	e.runBlock(t, docBlock(t, migrationSaveBlock), nil)
	var spec apiregv1.APIServiceSpec
	b, err := os.ReadFile(filepath.Join(e.repo, "previous-apiservice-spec.json"))
	if err != nil || json.Unmarshal(b, &spec) != nil || spec.Service == nil || spec.Service.Name != stack.AdapterService {
		t.Errorf("previous-apiservice-spec.json = %q (%v): want the spec of the APIService, routed to %s", b, err, stack.AdapterService)
	}

	wantIn(migrationCheckBlock, string(e.runBlock(t, docBlock(t, migrationCheckBlock), nil)), `"name":"llm_saturation"`)
	wantIn(migrationDescribeBlock, string(e.runBlock(t, docBlock(t, migrationDescribeBlock), subst)), "ValidMetricFound", "llm_saturation")
	// Verified TLS: insecureSkipTLSVerify unset, a caBundle (base64 of "-----BEGIN").
	out := string(e.runBlock(t, docBlock(t, upgradingCheckBlock), nil))
	if strings.HasPrefix(out, "true") || !strings.Contains(out, "LS0tLS1CRUdJTi") {
		t.Errorf("%s: %q, want no insecureSkipTLSVerify and a PEM caBundle", upgradingCheckBlock.File, out)
	}
}

// kustomizeCustomMetrics: docs/install.md's own-kustomization block (the custom-metrics
// variant), the per-pod query, then the uninstall's APIService line and its
// `kubectl delete -k my-install`.
func (e *installEnv) kustomizeCustomMetrics(t *testing.T) {
	e.requireClean(t)
	e.runBlock(t, docBlock(t, ownKustomizationBlock), nil)
	e.checkInstalled(t, readmeImage, tlsWant{secret: servingCertSecret})
	e.checkPerPod(t)
	e.uninstallOwnKustomization(t)
}

// kustomizeAsShipped: the per-pod section's block as written, manifests/ as they ship
// (image saturation-adapter:dev), its `-k` alternative over it, then the uninstall's
// APIService line and a delete of the same file.
func (e *installEnv) kustomizeAsShipped(t *testing.T) {
	e.requireClean(t)
	cmds := shdoc.Commands(docBlock(t, customMetricsBlock))
	if len(cmds) != 3 {
		t.Fatalf("docs/concepts.md per-pod block: %q, want the apply, its -k alternative and the query", cmds)
	}
	e.run(t, cmds[0], nil)
	// Not documented commands: the block goes straight to the query.
	e.run(t, "kubectl wait --for=condition=Available apiservice/v1beta1.external.metrics.k8s.io apiservice/v1beta2.custom.metrics.k8s.io --timeout=2m", nil)
	e.checkInstalled(t, devImage, tlsWant{secret: servingCertSecret})
	// The block's `# or: kubectl apply -k manifests/custom-metrics` applies the same
	// objects: over the file's it creates nothing.
	if out := string(e.run(t, cmds[1], nil)); strings.Contains(out, " created") || !strings.Contains(out, " unchanged") {
		t.Errorf("$ %s after the rendered file: want every object unchanged, none created:\n%s", cmds[1], out)
	}
	e.checkPerPod(t)
	// docs/troubleshooting.md's way out of a hanging uninstall: the APIServices first
	// (both custom.metrics.k8s.io versions exist here), then the rest.
	e.runBlock(t, docBlock(t, troubleshootingDeleteBlock), nil)
	e.run(t, "kubectl delete -f manifests/rendered/custom-metrics.yaml --ignore-not-found", nil)
	e.checkUninstalled(t)
}

// checkPerPod runs the per-pod section's query (the block's last command): the vLLM
// pod's own llm_saturation through the aggregator.
func (e *installEnv) checkPerPod(t *testing.T) {
	t.Helper()
	cmds := shdoc.Commands(docBlock(t, customMetricsBlock))
	query := cmds[len(cmds)-1]
	var pods struct {
		Items []struct {
			Metric struct {
				Name string `json:"name"`
			} `json:"metric"`
			Value string `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal(e.run(t, query, map[string]string{"<ns>": llmNamespace}), &pods); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Metric.Name != "llm_saturation" || pods.Items[0].Value != llmSaturation {
		t.Errorf("%s = %+v, want one pod's llm_saturation of %s", query, pods.Items, llmSaturation)
	}
}

// uninstallOwnKustomization runs docs/install.md's uninstall for an own kustomization: the
// APIService line and the `# or: kubectl delete -k my-install` alternative.
func (e *installEnv) uninstallOwnKustomization(t *testing.T) {
	t.Helper()
	uninstall := shdoc.Commands(docBlock(t, uninstallBlock))
	if len(uninstall) != 3 || uninstall[2] != "kubectl delete -k my-install --ignore-not-found" {
		t.Fatalf("docs/install.md uninstall block: %q, want the APIServices, the release's file and its `# or: kubectl delete -k my-install --ignore-not-found`", uninstall)
	}
	e.run(t, uninstall[0], nil)
	e.run(t, uninstall[2], nil)
	e.checkUninstalled(t)
}

// kustomizeInsecure: the same own-kustomization block with manifests/insecure, the
// explicit opt-out: the aggregator reaches the adapter without verifying it.
func (e *installEnv) kustomizeInsecure(t *testing.T) {
	e.requireClean(t)
	e.ownKustomizationAs(t, "../manifests/insecure")
	e.checkInstalled(t, readmeImage, tlsWant{insecure: true})
	// docs/upgrading.md's repair of an APIService left insecure by an earlier install.
	e.runBlock(t, docBlock(t, upgradingPatchBlock), nil)
	agg, err := aggregator.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	if api, err := agg.ApiregistrationV1().APIServices().Get(context.Background(), stack.APIServiceName, metav1.GetOptions{}); err != nil || api.Spec.InsecureSkipTLSVerify {
		t.Errorf("after %s's patch: APIService %+v (%v), want insecureSkipTLSVerify gone", upgradingPatchBlock.File, api, err)
	}
	e.uninstallOwnKustomization(t)
}

// helm: the README's Helm install (chart defaults: self-managed TLS) and docs/install.md's
// uninstall.
func (e *installEnv) helm(t *testing.T) {
	e.requireClean(t)
	e.runBlock(t, docBlock(t, helmBlock), nil)
	e.checkInstalled(t, readmeImage, tlsWant{secret: servingCertSecret})
	ns, err := e.cluster.Client.CoreV1().Namespaces().Get(context.Background(), stack.AdapterNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace label pod-security.kubernetes.io/enforce = %q, want restricted", got)
	}
	deletions := e.watchDeletions(t)
	e.runBlock(t, docBlock(t, helmUninstallBlock), nil)
	e.checkUninstalled(t)
	checkAPIServicesFirst(t, deletions())
}

// requireClean fails unless the previous subtest left no install behind.
func (e *installEnv) requireClean(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cluster.Client.CoreV1().Namespaces().Get(ctx, stack.AdapterNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace %s exists before the install (err %v): an earlier subtest left it", stack.AdapterNamespace, err)
	}
	t.Cleanup(func() {
		if t.Failed() { // leave the next subtest a clean cluster
			e.forceUninstall(ctx)
		}
	})
}

// forceUninstall removes whatever an install that failed half-way left: the Helm
// release, the APIServices, the cluster-scoped RBAC and kube-system's binding (labelled
// app.kubernetes.io/part-of by the kustomizations), and the namespace.
func (e *installEnv) forceUninstall(ctx context.Context) {
	_, _ = e.bash("helm uninstall saturation-adapter -n saturation-adapter --ignore-not-found")
	_, _ = e.cluster.Kubectl(ctx, "delete", "apiservice", stack.APIServiceName, "v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", "--ignore-not-found")
	const sel = "app.kubernetes.io/part-of=saturation-adapter"
	_, _ = e.cluster.Kubectl(ctx, "delete", "clusterrole,clusterrolebinding", "-l", sel, "--ignore-not-found")
	_, _ = e.cluster.Kubectl(ctx, "delete", "rolebinding", "-n", "kube-system", "-l", sel, "--ignore-not-found")
	_, _ = e.cluster.Kubectl(ctx, "delete", "namespace", stack.AdapterNamespace, "--ignore-not-found", "--timeout=2m")
}

// tlsWant is the TLS an install should end with.
type tlsWant struct {
	// insecure: the APIService skips verification and has no caBundle.
	insecure bool
	// secret names the serving certificate's Secret, which must exist.
	secret string
	// ca, when set, is the caBundle the APIService must hold (else any CA that
	// verifies the adapter).
	ca []byte
}

// checkInstalled: two adapter pods of image run by the agent as the manifests' user,
// the APIService Available with the TLS asked for, and the aggregator serving the
// External metric of the vLLM pods.
func (e *installEnv) checkInstalled(t *testing.T, image string, want tlsWant) {
	t.Helper()
	ctx := context.Background()
	e.waitAdapterPods(t, image)
	agg, err := aggregator.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	api, err := agg.ApiregistrationV1().APIServices().Get(ctx, stack.APIServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiServiceAvailable(api) {
		t.Errorf("APIService %s not Available: %+v", api.Name, api.Status.Conditions)
	}
	e.checkTLS(t, api, want)
	// The pods' processes run as the manifests' runAsUser.
	for _, p := range e.adapters.Pods() {
		if uid := processUID(p.PID); uid != "65534" {
			t.Errorf("pod %s's adapter (pid %d) runs as uid %q, want 65534 (runAsUser)", p.Name, p.PID, uid)
		}
	}
	path := "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + llmNamespace + "/llm_num_requests_waiting?labelSelector=app%3Dvllm"
	var value externalmetrics.ExternalMetricValueList
	var out []byte
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err = e.cluster.Kubectl(ctx, "get", "--raw", path)
		return err == nil && json.Unmarshal(out, &value) == nil && len(value.Items) == 1, nil
	}); err != nil {
		t.Fatalf("GET %s through the aggregator: %v %s", path, err, out)
	}
	if got := value.Items[0].Value.String(); got != fmt.Sprint(llmWaiting) {
		t.Errorf("llm_num_requests_waiting = %s, want %d (the vLLM pod's queue)", got, llmWaiting)
	}
}

// checkTLS checks the APIService's TLS settings against want and, for verified TLS,
// verifies the adapter as the aggregator does: through the Service's ClusterIP, with
// the caBundle as the only root and the Service's DNS name as the server name.
func (e *installEnv) checkTLS(t *testing.T, api *apiregv1.APIService, want tlsWant) {
	t.Helper()
	ctx := context.Background()
	svc, err := e.cluster.Client.CoreV1().Services(stack.AdapterNamespace).Get(ctx, stack.AdapterService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !want.insecure {
		if want.ca != nil && !bytes.Equal(api.Spec.CABundle, want.ca) {
			t.Errorf("APIService caBundle:\n%s\nwant the CA given:\n%s", api.Spec.CABundle, want.ca)
		}
		if api.Spec.InsecureSkipTLSVerify || len(api.Spec.CABundle) == 0 {
			t.Errorf("APIService: insecureSkipTLSVerify %v, caBundle %d bytes; want verified TLS", api.Spec.InsecureSkipTLSVerify, len(api.Spec.CABundle))
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(api.Spec.CABundle) {
			t.Fatalf("caBundle holds no certificate: %q", api.Spec.CABundle)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(svc.Spec.ClusterIP, "443"),
			&tls.Config{RootCAs: roots, ServerName: stack.AdapterService + "." + stack.AdapterNamespace + ".svc"})
		if err != nil {
			t.Errorf("verifying the adapter behind %s:443 with the APIService's caBundle: %v", svc.Spec.ClusterIP, err)
		} else {
			conn.Close()
		}
		if _, err := e.cluster.Client.CoreV1().Secrets(stack.AdapterNamespace).Get(ctx, want.secret, metav1.GetOptions{}); err != nil {
			t.Errorf("the serving certificate's Secret: %v", err)
		}
	} else if !api.Spec.InsecureSkipTLSVerify || len(api.Spec.CABundle) != 0 {
		t.Errorf("APIService: insecureSkipTLSVerify %v, caBundle %d bytes; want the insecure opt-out", api.Spec.InsecureSkipTLSVerify, len(api.Spec.CABundle))
	}
}

// waitAdapterPods waits for the Deployment's two pods (replicas: 2) to be Ready, each
// running image: `kubectl wait` on the APIService returns once one pod serves.
func (e *installEnv) waitAdapterPods(t *testing.T, image string) {
	t.Helper()
	var pods *corev1.PodList
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		pods, err = e.cluster.Client.CoreV1().Pods(stack.AdapterNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{"app.kubernetes.io/name": "saturation-adapter"}.String(),
		})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if podIsReady(&p) {
				ready++
			}
		}
		return ready == 2 && len(pods.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("adapter pods: want 2 Ready within 2m, have %d", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image != image {
			t.Errorf("pod %s runs %s, want %s", p.Name, p.Spec.Containers[0].Image, image)
		}
	}
}

// checkUninstalled: the APIServices and the namespace are gone, and discovery of every
// group answers (an APIService left without its Service would fail it).
func (e *installEnv) checkUninstalled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	agg, err := aggregator.NewForConfig(e.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	list, err := agg.ApiregistrationV1().APIServices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Items {
		if a.Spec.Service != nil {
			t.Errorf("APIService %s (service %s/%s) left after the uninstall", a.Name, a.Spec.Service.Namespace, a.Spec.Service.Name)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.cluster.Client.CoreV1().Namespaces().Get(ctx, stack.AdapterNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("namespace %s still there 2m after the uninstall", stack.AdapterNamespace)
	}
	if out, err := e.cluster.Kubectl(ctx, "api-resources", "-o", "name"); err != nil {
		t.Errorf("discovery after the uninstall: %v\n%s", err, out)
	}
}

// run runs one command line through bash in the checkout copy, with the documents'
// placeholders replaced, and returns its stdout; it fails the test on an error.
func (e *installEnv) run(t *testing.T, command string, subst map[string]string) []byte {
	t.Helper()
	for k, v := range subst {
		command = strings.ReplaceAll(command, k, v)
	}
	out, err := e.bash(command)
	if err != nil {
		t.Fatalf("$ %s\n%v", command, err)
	}
	return out
}

// runBlock runs a documented block as one bash script (-e -o pipefail: it stops at the
// first failing command), logs it and its output, and returns its stdout.
func (e *installEnv) runBlock(t *testing.T, block string, subst map[string]string) []byte {
	t.Helper()
	for k, v := range subst {
		block = strings.ReplaceAll(block, k, v)
	}
	out, err := e.bash(block)
	if err != nil {
		t.Fatalf("documented block:\n%s\nfailed: %v", block, err)
	}
	t.Logf("documented block:\n%s----- stdout -----\n%s", block, out)
	return out
}

// bash runs script with bash -e -o pipefail in the checkout copy and returns its
// stdout; the error carries both outputs.
func (e *installEnv) bash(script string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = e.repo, e.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%w\n%s%s", err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

// copyCheckout copies the checkout's tracked and untracked, not ignored, files (what a
// clone holds, plus work in progress) to dst, keeping modes and modification times (so
// make sees the cached tools as up to date), and links the ignored .cache.
func copyCheckout(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		st, err := os.Lstat(src)
		if os.IsNotExist(err) { // deleted in the work tree
			continue
		}
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			continue
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := copyFile(src, to, st.Mode().Perm()); err != nil {
			return err
		}
		if err := os.Chtimes(to, st.ModTime(), st.ModTime()); err != nil {
			return err
		}
	}
	cache, err := filepath.EvalSymlinks(filepath.Join(root, ".cache"))
	if err != nil {
		return fmt.Errorf("the checkout's .cache (make e2e-tools builds it): %w", err)
	}
	return os.Symlink(cache, filepath.Join(dst, ".cache"))
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// processUID returns the real uid of a process, from /proc.
func processUID(pid int) string {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return ""
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func apiServiceAvailable(a *apiregv1.APIService) bool {
	for _, c := range a.Status.Conditions {
		if c.Type == apiregv1.Available {
			return c.Status == apiregv1.ConditionTrue
		}
	}
	return false
}

func slicesContainsName(rs []metav1.APIResource, name string) bool {
	for _, r := range rs {
		if r.Name == name {
			return true
		}
	}
	return false
}

func podLogs(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "pods", "*.log"))
	return files
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
