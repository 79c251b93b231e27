package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// dryRunNamespaces are the namespaces the renderings put objects in besides the
// adapter's: kube-system (the auth reader binding) exists; monitoring is where the
// Prometheus RBAC binds its ServiceAccount; team-a and team-b are the chart's
// flags.namespaces case; examples holds manifests/examples (the live subtests' vllm
// Deployment is in llm).
var dryRunNamespaces = []string{stack.AdapterNamespace, "monitoring", "team-a", "team-b", "examples"}

// helmDryRuns are the chart's renderings applied with server-side dry-run: the defaults,
// each TLS mode with and without custom.metrics.k8s.io, and the options that add or
// change objects (namespace-scoped RBAC, NetworkPolicy for each source, monitoring,
// priorityClassName, a policy config).
var helmDryRuns = map[string][]string{
	"defaults":                  nil,
	"customMetrics":             {"--set", "customMetrics.enabled=true"},
	"certManager":               {"--set", "tls.mode=certManager"},
	"certManager/customMetrics": {"--set", "tls.mode=certManager", "--set", "customMetrics.enabled=true"},
	"certManager/issuerRef":     {"--set", "tls.mode=certManager", "--set", "tls.certManager.issuerRef.name=corp-ca", "--set", "tls.certManager.issuerRef.kind=ClusterIssuer", "--set", "tls.certManager.issuerRef.group=cert-manager.io"},
	"secret":                    {"--set", "tls.mode=secret", "--set", "tls.secret.name=user-tls", "--set-string", "tls.secret.caBundle=" + dryRunCABundle},
	"secret/customMetrics":      {"--set", "tls.mode=secret", "--set", "tls.secret.name=user-tls", "--set-string", "tls.secret.caBundle=" + dryRunCABundle, "--set", "customMetrics.enabled=true"},
	"insecure":                  {"--set", "tls.mode=insecure"},
	"insecure/customMetrics":    {"--set", "tls.mode=insecure", "--set", "customMetrics.enabled=true"},
	"namespaces":                {"--set", "flags.namespaces={team-a,team-b}"},
	"networkPolicy":             {"--set", "networkPolicy.enabled=true"},
	"networkPolicy/prometheus":  {"--set", "networkPolicy.enabled=true", "--set", "flags.source=prometheus", "--set", "flags.prometheusUrl=http://prometheus-operated.monitoring:9090"},
	"monitoring":                {"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set", "dashboard.enabled=true"},
	"priorityClassName":         {"--set", "priorityClassName=system-cluster-critical"},
	"replicas=3":                {"--set", "replicas=3"},
}

// dryRunCABundle is a CA certificate's PEM for tls.secret.caBundle (the API server
// checks only that caBundle is bytes).
const dryRunCABundle = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

// dryRun applies every rendering a user may apply with `kubectl apply --server-side
// --dry-run=server`: each kustomization's committed rendering (manifests/rendered/,
// which `make verify` keeps equal to `kustomize build`), the examples, and the chart's
// `helm template` output for each of helmDryRuns. The API server validates each object
// against its schema, the CRDs' too (cert-manager's Issuer and Certificate, the
// Prometheus Operator's ServiceMonitor and PrometheusRule, from testdata/crds), and
// runs admission, Pod Security's too; nothing is stored.
func (e *installEnv) dryRun(t *testing.T) {
	ctx := context.Background()
	e.installCRDs(t)
	// The Namespaces exist for real: a dry-run Namespace is not there for the objects
	// after it.
	for _, ns := range dryRunNamespaces {
		if err := e.cluster.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, ns := range dryRunNamespaces {
			_ = e.cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		}
	}()
	rendered, err := filepath.Glob(filepath.Join(e.repo, "manifests", "rendered", "*.yaml"))
	if err != nil || len(rendered) < 5 {
		t.Fatalf("manifests/rendered: %v %v, want the five kustomizations' renderings", rendered, err)
	}
	examples, _ := filepath.Glob(filepath.Join(e.repo, "manifests", "examples", "*.yaml"))
	for _, f := range append(rendered, examples...) {
		rel, _ := filepath.Rel(e.repo, f)
		ns := ""
		if strings.Contains(rel, "examples") {
			ns = " -n examples"
		}
		t.Run(strings.ReplaceAll(rel, "/", "_"), func(t *testing.T) {
			e.serverDryRun(t, "kubectl apply --server-side --dry-run=server"+ns+" -f "+rel)
		})
	}
	for name, args := range helmDryRuns {
		t.Run("helm_"+name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "chart.yaml")
			e.run(t, "helm template saturation-adapter charts/saturation-adapter -n saturation-adapter "+shellJoin(args)+" > "+out, nil)
			e.serverDryRun(t, "kubectl apply --server-side --dry-run=server -f "+out)
		})
	}
}

// serverDryRun runs a dry-run apply and checks that it named objects (an empty
// rendering would pass silently) and that none was left out.
func (e *installEnv) serverDryRun(t *testing.T, command string) {
	t.Helper()
	out := string(e.run(t, command, nil))
	if !strings.Contains(out, "(server dry run)") {
		t.Errorf("$ %s\n%s\nwant a line per object ending in (server dry run)", command, out)
	}
	t.Logf("$ %s: %d objects", command, strings.Count(out, "(server dry run)"))
}

// e2eDir is this module's directory in the checkout copy.
func (e *installEnv) e2eDir() string { return filepath.Join(e.repo, "test", "e2e") }

// shellJoin quotes each argument for bash.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
