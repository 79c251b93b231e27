package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// adapterUser is the adapter's ServiceAccount as the API server names it.
const adapterUser = "system:serviceaccount:" + stack.AdapterNamespace + ":" + stack.AdapterServiceAccount

// auditPolicy logs, at Metadata level, every request the adapter's ServiceAccount makes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["` + adapterUser + `"]
- level: None
`

// TestRBACExactlyWhatTheAdapterCalls (issue 20): the adapter runs as its ServiceAccount with
// the shipped roles, once as kustomize's base ships them and once as the Helm chart renders
// them (default values: self-managed TLS), against a real kube-apiserver that writes an
// audit log of every request the ServiceAccount makes. The test drives every path that
// calls the API: informers (pods, HPAs), Events on an HPA the advisor warns about (twice,
// so that client-go's correlator patches the first), delegated authentication and
// authorization (a bearer token on /metrics: TokenReview and SubjectAccessReview; the
// front-proxy CA from kube-system), the managed serving certificate (its Secret created,
// watched, renewed) and the APIService (checked, its caBundle written). Then it fails on
//   - a missing grant: any request of the ServiceAccount answered 403, and
//   - an unused grant: any (API group, resource, verb, resource name) of the adapter's own
//     roles that no request used (a built-in role bound to it, system:auth-delegator or
//     extension-apiserver-authentication-reader, must serve at least one request). An
//     informer's watch that streams the initial list (client-go's watch-list, on by
//     default against 1.37) uses the list grant: on an API server without it the
//     informer lists.
func TestRBACExactlyWhatTheAdapterCalls(t *testing.T) {
	t.Parallel()
	repo, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(repo, "manifests", "base")
	for _, tc := range []struct {
		name  string
		files func(t *testing.T, dir string) []string
	}{
		{"kustomize base", func(*testing.T, string) []string {
			var out []string
			for _, f := range stack.AdapterManifests {
				out = append(out, filepath.Join(base, f))
			}
			return out
		}},
		{"helm chart", func(t *testing.T, dir string) []string {
			return []string{filepath.Join(base, "namespace.yaml"), chartRBAC(t, repo, dir)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			policy := filepath.Join(dir, "audit-policy.yaml")
			if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
				t.Fatal(err)
			}
			auditLog := filepath.Join(dir, "audit.log")
			files := tc.files(t, dir)
			s := startStack(t, stack.Options{
				Dir:            filepath.Join(dir, "stack"),
				APIServerFlags: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog, "--audit-log-maxbackup=0"},
				Adapter: stack.AdapterOptions{RBACFiles: files,
					// A one-minute certificate is renewed (the Secret updated) within the test.
					ExtraArgs: []string{"--tls-managed-serving-validity=1m", "--tls-managed-ca-validity=3m"}},
			})
			roles := grantsOf(t, s, files)
			exerciseAdapter(t, s)
			var reqs []auditRequest
			var unused []string
			// The certificate's renewal comes about 40 s after the start; the Events'
			// patch after the second warning. Wait until every grant was used, or time out.
			_ = wait.PollUntilContextTimeout(context.Background(), 2*time.Second, 150*time.Second, true, func(context.Context) (bool, error) {
				reqs = readAudit(t, auditLog)
				unused = unusedGrants(roles, reqs)
				return len(unused) == 0, nil
			})
			var refused []string
			for _, r := range reqs {
				if r.Code == http.StatusForbidden {
					refused = append(refused, r.String())
				}
			}
			slices.Sort(refused)
			refused = slices.Compact(refused)
			if len(refused) > 0 {
				t.Errorf("missing grants: the API server refused the adapter %d kinds of request:\n  %s", len(refused), strings.Join(refused, "\n  "))
			}
			if len(unused) > 0 {
				t.Errorf("unused grants: the shipped roles grant what the adapter never called:\n  %s\nrequests made:\n  %s",
					strings.Join(unused, "\n  "), strings.Join(summarize(reqs), "\n  "))
			}
			t.Logf("%d requests of %s audited:\n  %s", len(reqs), adapterUser, strings.Join(summarize(reqs), "\n  "))
		})
	}
}

// chartRBAC renders the chart (release saturation-adapter in namespace saturation-adapter,
// default values) and writes its ServiceAccount and RBAC objects to a file in dir.
func chartRBAC(t *testing.T, repo, dir string) string {
	t.Helper()
	helm := os.Getenv("SATURATION_ADAPTER_HELM")
	if helm == "" {
		t.Fatal("SATURATION_ADAPTER_HELM must name the helm binary (make tools builds it into .cache/bin)")
	}
	cmd := exec.Command(helm, "template", stack.AdapterNamespace, filepath.Join(repo, "charts", "saturation-adapter"), "-n", stack.AdapterNamespace)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v: %s", err, stderr.String())
	}
	var keep []string
	for _, doc := range strings.Split(string(out), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("a document of helm template: %v", err)
		}
		switch meta.Kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			keep = append(keep, doc)
		}
	}
	if len(keep) == 0 {
		t.Fatal("helm template rendered no RBAC")
	}
	f := filepath.Join(dir, "chart-rbac.yaml")
	if err := os.WriteFile(f, []byte(strings.Join(keep, "\n---")), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// role is the rules a binding gives the adapter, where they apply, and whether the adapter
// ships them (its own role) or they are Kubernetes' (built in).
type role struct {
	name      string
	namespace string // "" for a ClusterRoleBinding
	rules     []rbacv1.PolicyRule
	own       bool
}

// grantsOf returns every role bound to the adapter's ServiceAccount by the files: their
// rules from the files, or, for a role they do not define, from the cluster.
func grantsOf(t *testing.T, s *stack.Stack, files []string) []role {
	t.Helper()
	clusterRoles, roles := map[string][]rbacv1.PolicyRule{}, map[string][]rbacv1.PolicyRule{}
	var crbs []rbacv1.ClusterRoleBinding
	var rbs []rbacv1.RoleBinding
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch meta.Kind {
			case "ClusterRole":
				var r rbacv1.ClusterRole
				mustYAML(t, doc, &r)
				clusterRoles[r.Name] = r.Rules
			case "Role":
				var r rbacv1.Role
				mustYAML(t, doc, &r)
				roles[r.Namespace+"/"+r.Name] = r.Rules
			case "ClusterRoleBinding":
				var b rbacv1.ClusterRoleBinding
				mustYAML(t, doc, &b)
				crbs = append(crbs, b)
			case "RoleBinding":
				var b rbacv1.RoleBinding
				mustYAML(t, doc, &b)
				rbs = append(rbs, b)
			}
		}
	}
	isAdapter := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == stack.AdapterServiceAccount && s.Namespace == stack.AdapterNamespace
		})
	}
	ctx := context.Background()
	var out []role
	for _, b := range crbs {
		if !isAdapter(b.Subjects) {
			continue
		}
		rules, own := clusterRoles[b.RoleRef.Name]
		if !own {
			cr, err := s.Cluster.Client.RbacV1().ClusterRoles().Get(ctx, b.RoleRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("ClusterRole %s bound to the adapter: %v", b.RoleRef.Name, err)
			}
			rules = cr.Rules
		}
		out = append(out, role{name: "ClusterRole " + b.RoleRef.Name, rules: rules, own: own})
	}
	for _, b := range rbs {
		if !isAdapter(b.Subjects) {
			continue
		}
		var rules []rbacv1.PolicyRule
		own := false
		switch b.RoleRef.Kind {
		case "ClusterRole":
			rules, own = clusterRoles[b.RoleRef.Name]
		default:
			rules, own = roles[b.Namespace+"/"+b.RoleRef.Name]
			if !own {
				r, err := s.Cluster.Client.RbacV1().Roles(b.Namespace).Get(ctx, b.RoleRef.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("Role %s/%s bound to the adapter: %v", b.Namespace, b.RoleRef.Name, err)
				}
				rules = r.Rules
			}
		}
		out = append(out, role{name: b.RoleRef.Kind + " " + b.RoleRef.Name + " in " + b.Namespace, namespace: b.Namespace, rules: rules, own: own})
	}
	if len(out) == 0 {
		t.Fatal("no role is bound to the adapter's ServiceAccount")
	}
	return out
}

func mustYAML(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatalf("decoding %.80s…: %v", doc, err)
	}
}

// exerciseAdapter drives every path of the adapter that calls the API server.
func exerciseAdapter(t *testing.T, s *stack.Stack) {
	t.Helper()
	ctx := context.Background()
	c := s.Cluster.Client
	// An HPA the advisor warns about (minReplicas 0 on a metric computed from pods only):
	// an Event. The warning cleared and raised again gives the same Event, which client-go's
	// correlator counts by patching the first.
	hpa := stack.HPA("rbac", "rbac", "llm_saturation", map[string]string{"app": "rbac"}, autoscalingv2.ValueMetricType, "1", 0, 2, 0)
	if _, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	events := func() int32 {
		list, err := c.CoreV1().Events(s.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0
		}
		var n int32
		for _, e := range list.Items {
			if e.Reason == "NoZeroCapableInput" {
				n += max(e.Count, 1)
			}
		}
		return n
	}
	waitFor(t, "the advisor's Event", func() bool { return events() >= 1 })
	for _, minReplicas := range []int32{1, 0} {
		// The HPA controller writes the HPA's status meanwhile: a conflict is
		// read again and retried, as a client of a controlled object does.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			h, err := c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Get(ctx, "rbac", metav1.GetOptions{})
			if err != nil {
				return err
			}
			h.Spec.MinReplicas = ptr.To(minReplicas)
			_, err = c.AutoscalingV2().HorizontalPodAutoscalers(s.Namespace).Update(ctx, h, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
	}
	waitFor(t, "the advisor's Event counted twice", func() bool { return events() >= 2 })

	// A bearer token on the adapter's own /metrics (as Prometheus scrapes it): delegated
	// authentication reviews the token, delegated authorization the request.
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts("default").CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the adapter on loopback; its certificate is not what this test checks
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(s.Adapter.Port)+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The External metrics API through the aggregator (front-proxy authentication).
	if _, err := s.Cluster.Kubectl(ctx, "get", "--raw", "/apis/external.metrics.k8s.io/v1beta1/namespaces/"+s.Namespace+"/llm_saturation?labelSelector=app%3Drbac"); err != nil {
		t.Logf("the External metric (no pods: an error is expected): %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// auditRequest is one audited request of the adapter.
type auditRequest struct {
	Verb, Group, Resource, Namespace, Name, URI string
	Code                                        int
}

func (r auditRequest) String() string {
	if r.Resource == "" {
		return fmt.Sprintf("%s %s → %d", r.Verb, r.URI, r.Code)
	}
	where := r.Resource
	if r.Group != "" {
		where += "." + r.Group
	}
	if r.Namespace != "" {
		where = r.Namespace + "/" + where
	}
	if r.Name != "" {
		where += "/" + r.Name
	}
	return fmt.Sprintf("%s %s → %d", r.Verb, where, r.Code)
}

// readAudit returns the adapter's requests from the audit log (JSON lines, audit.k8s.io/v1
// Events at stage ResponseComplete or Panic, and ResponseStarted for watches).
func readAudit(t *testing.T, path string) []auditRequest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []auditRequest
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Stage      string `json:"stage"`
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
			User       struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				Resource, Namespace, Name, APIGroup, Subresource string
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != adapterUser {
			continue
		}
		// A watch is logged when its response starts (and again when it ends,
		// minutes later); any other request when it completes.
		if ev.Stage != "ResponseComplete" && ev.Stage != "Panic" && (ev.Stage != "ResponseStarted" || ev.Verb != "watch") {
			continue
		}
		r := auditRequest{Verb: ev.Verb, URI: ev.RequestURI}
		if ev.ResponseStatus != nil {
			r.Code = ev.ResponseStatus.Code
		}
		if o := ev.ObjectRef; o != nil {
			r.Group, r.Resource, r.Namespace, r.Name = o.APIGroup, o.Resource, o.Namespace, o.Name
			if o.Subresource != "" {
				r.Resource += "/" + o.Subresource
			}
		}
		out = append(out, r)
	}
	return out
}

// unusedGrants names every grant of the adapter's own roles that no request used, and
// every built-in role bound to it that served no request.
func unusedGrants(roles []role, reqs []auditRequest) []string {
	var out []string
	for _, ro := range roles {
		anyUsed := false
		for _, rule := range ro.rules {
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						for _, n := range names {
							used := slices.ContainsFunc(reqs, func(r auditRequest) bool {
								return r.Resource != "" && r.Code != http.StatusForbidden && matches(g, r.Group) && matches(res, r.Resource) &&
									(matches(v, r.Verb) || v == "list" && r.watchList()) &&
									(n == "" || n == r.Name) && (ro.namespace == "" || ro.namespace == r.Namespace)
							})
							anyUsed = anyUsed || used
							if !used && ro.own {
								out = append(out, fmt.Sprintf("%s: %s %s.%s%s", ro.name, v, res, g, nameSuffix(n)))
							}
						}
					}
				}
			}
		}
		if !ro.own && !anyUsed {
			out = append(out, ro.name+": bound to the adapter, never used")
		}
	}
	return out
}

func matches(pattern, value string) bool { return pattern == "*" || pattern == value }

// watchList reports a watch that streams the initial list (sendInitialEvents=true):
// client-go's informers list that way on an API server that supports it (1.37 does) and
// fall back to a list on one that does not, so the list grant stays needed and counts
// as used by it.
func (r auditRequest) watchList() bool {
	return r.Verb == "watch" && strings.Contains(r.URI, "sendInitialEvents=true")
}

func nameSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " " + n
}

// summarize returns the distinct requests, sorted, with their counts.
func summarize(reqs []auditRequest) []string {
	count := map[string]int{}
	for _, r := range reqs {
		count[r.String()]++
	}
	out := make([]string, 0, len(count))
	for k, n := range count {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	slices.Sort(out)
	return out
}
