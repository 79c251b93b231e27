package manifests

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TLS modes, as the chart's tls.mode names them.
const (
	modeSelfManaged = "selfManaged"
	modeCertManager = "certManager"
	modeSecret      = "secret"
	modeInsecure    = "insecure"
)

func TestTLSModes(t *testing.T) {
	for _, tc := range []struct{ path, mode string }{
		{renderedPath, modeSelfManaged},
		{customMetricsPath, modeSelfManaged},
		{certManagerPath, modeCertManager},
		{insecurePath, modeInsecure},
	} {
		t.Run(tc.path, func(t *testing.T) { checkTLS(t, decodeFile(t, tc.path), tc.mode, nil) })
	}
}

// sortStrings compares string slices as sets (kustomize and Helm order them differently).
var sortStrings = cmpopts.SortSlices(func(a, b string) bool { return a < b })

// checkTLS fails the test unless objs (a whole install named saturation-adapter in
// namespace saturation-adapter) set up mode consistently: the adapter's arguments and
// volumes, the APIServices' trust (caBundle, cainjector annotation or
// insecureSkipTLSVerify), and RBAC that grants the self-managed mode exactly its Secret
// and APIServices and the other modes nothing but `get` on their APIServices.
// caBundle is the bundle the secret mode must write.
func checkTLS(t *testing.T, objs []any, mode string, caBundle []byte) {
	t.Helper()
	c := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec.Containers[0]
	pod := only[*appsv1.Deployment](t, objs, adapterName).Spec.Template.Spec
	apis := all[*apiService](objs)
	var names []string
	for _, a := range apis {
		names = append(names, a.Name)
	}
	if !slices.Contains(names, externalAPIService) {
		t.Fatalf("no APIService %s", externalAPIService)
	}
	managedArgs := []string{"--tls-managed-secret", "--apiservices"}
	fileArgs := map[string]string{
		"--tls-cert-file":        "/etc/saturation-adapter/tls/tls.crt",
		"--tls-private-key-file": "/etc/saturation-adapter/tls/tls.key",
	}
	wantSecretVolume := ""

	apiRole := only[*rbacv1.ClusterRole](t, objs, "saturation-adapter:apiservices")
	wantAPIRule := rbacv1.PolicyRule{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, ResourceNames: names, Verbs: []string{"get"}}
	roles := all[*rbacv1.Role](objs)
	servingRole := slices.IndexFunc(roles, func(r *rbacv1.Role) bool { return r.Name == "saturation-adapter:serving-cert" })

	switch mode {
	case modeSelfManaged:
		if got := flagValue(c.Args, "--tls-managed-secret"); got != servingCertSecret {
			t.Errorf("--tls-managed-secret = %q, want %q", got, servingCertSecret)
		}
		got := strings.Split(flagValue(c.Args, "--apiservices"), ",")
		if diff := cmp.Diff(names, got, sortStrings); diff != "" {
			t.Errorf("--apiservices: want every APIService of the install (-want +got):\n%s", diff)
		}
		for f := range fileArgs {
			if flagValue(c.Args, f) != "" {
				t.Errorf("%s set in the self-managed mode", f)
			}
		}
		for _, a := range apis {
			if a.Spec.InsecureSkipTLSVerify || len(a.Spec.CABundle) > 0 || len(a.Annotations) > 0 {
				t.Errorf("APIService %s: want no caBundle, insecureSkipTLSVerify or annotation (the adapter writes caBundle), got %+v", a.Name, a)
			}
		}
		wantAPIRule.Verbs = []string{"get", "update"}
		if servingRole < 0 {
			t.Fatal("no Role saturation-adapter:serving-cert")
		}
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{servingCertSecret}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		}
		if diff := cmp.Diff(want, roles[servingRole].Rules); diff != "" {
			t.Errorf("serving-cert Role rules (-want +got):\n%s", diff)
		}
		if roles[servingRole].Namespace != namespace {
			t.Errorf("serving-cert Role in namespace %q, want %q", roles[servingRole].Namespace, namespace)
		}
		b := only[*rbacv1.RoleBinding](t, objs, "saturation-adapter:serving-cert")
		if b.Namespace != namespace || b.RoleRef.Name != roles[servingRole].Name || len(b.Subjects) != 1 || b.Subjects[0].Name != adapterName {
			t.Errorf("serving-cert RoleBinding = %+v", b)
		}
	case modeCertManager, modeSecret, modeInsecure:
		for _, f := range managedArgs {
			if flagValue(c.Args, f) != "" {
				t.Errorf("%s set in mode %s", f, mode)
			}
		}
		if servingRole >= 0 {
			t.Errorf("Role saturation-adapter:serving-cert present in mode %s", mode)
		}
		if mode == modeInsecure {
			for f := range fileArgs {
				if flagValue(c.Args, f) != "" {
					t.Errorf("%s set in the insecure mode", f)
				}
			}
			for _, a := range apis {
				if !a.Spec.InsecureSkipTLSVerify || len(a.Spec.CABundle) > 0 {
					t.Errorf("APIService %s: want insecureSkipTLSVerify and no caBundle", a.Name)
				}
			}
			break
		}
		for f, v := range fileArgs {
			if got := flagValue(c.Args, f); got != v {
				t.Errorf("%s = %q, want %q", f, got, v)
			}
		}
		if mode == modeSecret {
			wantSecretVolume = "user-provided-tls"
			for _, a := range apis {
				if a.Spec.InsecureSkipTLSVerify || string(a.Spec.CABundle) != string(caBundle) || len(a.Annotations) > 0 {
					t.Errorf("APIService %s: want caBundle %q only, got %+v", a.Name, caBundle, a.Spec)
				}
			}
			break
		}
		wantSecretVolume = "saturation-adapter-tls"
		checkCertManager(t, objs, apis, wantSecretVolume)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	if diff := cmp.Diff([]rbacv1.PolicyRule{wantAPIRule}, apiRole.Rules, sortStrings); diff != "" {
		t.Errorf("apiservices ClusterRole rules (-want +got):\n%s", diff)
	}

	// The certificate files come from a read-only Secret volume at the flags' directory.
	var secretVolume string
	for _, v := range pod.Volumes {
		if v.Name == "tls" && v.Secret != nil {
			secretVolume = v.Secret.SecretName
		}
	}
	if secretVolume != wantSecretVolume {
		t.Errorf("tls Secret volume = %q, want %q", secretVolume, wantSecretVolume)
	}
	if wantSecretVolume != "" {
		wantMount := corev1.VolumeMount{Name: "tls", MountPath: "/etc/saturation-adapter/tls", ReadOnly: true}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return cmp.Equal(m, wantMount) }) {
			t.Errorf("volumeMounts %+v lack %+v", c.VolumeMounts, wantMount)
		}
	}
}

// checkCertManager fails the test unless the cert-manager objects chain up: the serving
// Certificate (Secret secret, the Service's DNS names) is signed by a CA Issuer whose
// CA Certificate is self-signed, and every APIService asks cainjector for that serving
// Certificate's CA.
func checkCertManager(t *testing.T, objs []any, apis []*apiService, secret string) {
	t.Helper()
	serving := only[*certificate](t, objs, adapterName)
	if serving.Spec.SecretName != secret || serving.Spec.IsCA {
		t.Errorf("serving Certificate = %+v, want secretName %s, not a CA", serving.Spec, secret)
	}
	svcHost := adapterName + "." + namespace + ".svc"
	if !slices.Contains(serving.Spec.DNSNames, svcHost) {
		t.Errorf("serving Certificate dnsNames %v lack %s (the name the aggregator verifies)", serving.Spec.DNSNames, svcHost)
	}
	caIssuer := only[*issuer](t, objs, serving.Spec.IssuerRef.Name)
	if serving.Spec.IssuerRef.Kind != "Issuer" || caIssuer.Spec.CA == nil {
		t.Fatalf("serving Certificate issuer %+v is not a CA Issuer", serving.Spec.IssuerRef)
	}
	var ca *certificate
	for _, c := range all[*certificate](objs) {
		if c.Spec.SecretName == caIssuer.Spec.CA.SecretName {
			ca = c
		}
	}
	if ca == nil || !ca.Spec.IsCA {
		t.Fatalf("no CA Certificate writes Secret %s", caIssuer.Spec.CA.SecretName)
	}
	if root := only[*issuer](t, objs, ca.Spec.IssuerRef.Name); root.Spec.SelfSigned == nil {
		t.Errorf("CA Certificate issuer %s is not self-signed", root.Name)
	}
	for _, a := range apis {
		if got, want := a.Annotations["cert-manager.io/inject-ca-from"], namespace+"/"+serving.Name; got != want {
			t.Errorf("APIService %s inject-ca-from = %q, want %q", a.Name, got, want)
		}
		if a.Spec.InsecureSkipTLSVerify || len(a.Spec.CABundle) > 0 {
			t.Errorf("APIService %s: want neither insecureSkipTLSVerify nor a caBundle of its own", a.Name)
		}
	}
}

// TestTLSDocRBAC: the RBAC excerpt of docs/tls.md ("RBAC for this mode") is the
// self-managed install's: the rules of the ClusterRole saturation-adapter:apiservices
// and of the Role saturation-adapter:serving-cert, as kustomize renders them and as
// the chart renders them with its defaults.
func TestTLSDocRBAC(t *testing.T) {
	doc, err := os.ReadFile("../docs/tls.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "RBAC for this mode")
	if !ok {
		t.Fatal("docs/tls.md has no \"RBAC for this mode\"")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/tls.md: no yaml block after \"RBAC for this mode\"")
	}
	parts := strings.Split(block, "\n---\n")
	if len(parts) != 2 {
		t.Fatalf("docs/tls.md's RBAC excerpt: %d parts, want the ClusterRole's rules --- the Role's", len(parts))
	}
	var documented [2][]rbacv1.PolicyRule
	for i, p := range parts {
		if err := yaml.UnmarshalStrict([]byte(p), &documented[i]); err != nil {
			t.Fatalf("docs/tls.md's RBAC excerpt, part %d: %v\n%s", i+1, err, p)
		}
	}
	for name, objs := range map[string][]any{
		renderedPath:                   decodeFile(t, renderedPath),
		"helm template (the defaults)": decode(t, "helm template", mustHelmTemplate(t)),
	} {
		apiRole := only[*rbacv1.ClusterRole](t, objs, "saturation-adapter:apiservices")
		if diff := cmp.Diff(apiRole.Rules, documented[0]); diff != "" {
			t.Errorf("docs/tls.md's ClusterRole rules and %s's (-%s +docs):\n%s", name, name, diff)
		}
		role := only[*rbacv1.Role](t, objs, "saturation-adapter:serving-cert")
		if diff := cmp.Diff(role.Rules, documented[1]); diff != "" {
			t.Errorf("docs/tls.md's Role rules and %s's (-%s +docs):\n%s", name, name, diff)
		}
	}
}
