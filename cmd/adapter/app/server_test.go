package app

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/provider"
)

// testPKI is a client CA and a client certificate in group system:masters, the
// group delegated authorization allows without a SubjectAccessReview.
type testPKI struct {
	caFile string
	client tls.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "test-client-ca"}, caKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	caPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		t.Fatal(err)
	}
	if err := certutil.WriteCert(caFile, caPEM); err != nil {
		t.Fatal(err)
	}
	// client-go's cert helpers make CAs and self-signed pairs only; a CA-signed
	// client certificate needs x509 directly.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "test-admin", Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := certutil.EncodeCertificates(&x509.Certificate{Raw: der})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{caFile: caFile, client: pair}
}

// adapterUnderTest is the real server, built by Options → Config → New on
// loopback over a fake clientset.
type adapterUnderTest struct {
	base    string
	client  *http.Client
	fake    *fake.Clientset
	engine  atomic.Int64 // engine requests
	cancel  context.CancelFunc
	stopped chan error
}

// startAdapter starts the adapter over one Ready pod labelled app=vllm per
// file, each served by an engine answering that file's /metrics body, and an
// HPA on llm_saturation for app=vllm.
func startAdapter(t *testing.T, files ...string) *adapterUnderTest {
	t.Helper()
	return startAdapterWith(t, nil, nil, files...)
}

// startAdapterWith is startAdapter with the options changed by optsMod before
// Config, and the Config (whose Client is then the fake clientset) by cfgMod
// before the server is built; either may be nil.
func startAdapterWith(t *testing.T, optsMod func(*Options), cfgMod func(*Config), files ...string) *adapterUnderTest {
	t.Helper()
	pki := newTestPKI(t)
	a := &adapterUnderTest{stopped: make(chan error, 1)}

	var objs []runtime.Object
	for i, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			a.engine.Add(1)
			_, _ = w.Write(body)
		}))
		t.Cleanup(engine.Close)
		_, port, _ := net.SplitHostPort(engine.Listener.Addr().String())
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: fmt.Sprintf("vllm-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)),
				Labels: map[string]string{"app": "vllm"}, Annotations: map[string]string{podselect.AnnotationPort: port}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}

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
	// Each pod's first scheduled scrape comes at its phase within the hour (from
	// its UID: minutes after start for uid-0 to uid-5), so during the test engine
	// requests come from metric requests only, which the discovery check relies on.
	o.Scrape.Interval = time.Hour
	if optsMod != nil {
		optsMod(o)
	}
	o.Complete()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	a.fake = fake.NewClientset(append(objs,
		&autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "vllm"},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "vllm"},
				MinReplicas:    ptr.To[int32](1), MaxReplicas: 8,
				Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: "llm_saturation", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm"}}},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: resource.NewQuantity(1, resource.DecimalSI)},
				}}},
			},
		},
	)...)
	cfg.Client = a.fake
	if cfgMod != nil {
		cfgMod(cfg)
	}
	s, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.stopped <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-a.stopped:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})

	a.base = "https://" + ln.Addr().String()
	a.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		// The serving certificate is self-signed into --cert-dir at start.
		InsecureSkipVerify: true, //nolint:gosec // a loopback test server
		Certificates:       []tls.Certificate{pki.client},
	}}}
	t.Cleanup(a.client.CloseIdleConnections)
	return a
}

// waitReady waits until /readyz answers 200.
func (a *adapterUnderTest) waitReady(t *testing.T) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := a.client.Get(a.base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		code, body := a.get(t, "/readyz?verbose")
		t.Fatalf("/readyz never became ready: %v: HTTP %d\n%s", err, code, body)
	}
}

// value GETs one External metric for app=vllm and returns its only item's value.
func (a *adapterUnderTest) value(t *testing.T, metric string) string {
	t.Helper()
	code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/"+metric+"?labelSelector="+url.QueryEscape("app=vllm"))
	if code != http.StatusOK {
		t.Fatalf("%s: HTTP %d: %s", metric, code, body)
	}
	var list v1beta1.ExternalMetricValueList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%s: %d items, want 1", metric, len(list.Items))
	}
	return list.Items[0].Value.String()
}

func (a *adapterUnderTest) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := a.client.Get(a.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b
}

// TestAssembledServer builds the adapter as `adapter` does (Options → Config →
// Complete().New() → Run) and checks what it serves: /readyz once the caches
// sync, /livez, the External metrics discovery document (static, no backend
// I/O), one External metric request, and /metrics with the API server's and the
// adapter's own metrics side by side (it once answered 500 for duplicate
// collectors).
func TestAssembledServer(t *testing.T) {
	a := startAdapter(t, filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom")) // saturation 7.4
	a.waitReady(t)
	if code, body := a.get(t, "/readyz?verbose"); code != http.StatusOK || !strings.Contains(string(body), "[+]informer-sync ok") ||
		strings.Count(string(body), "informer-sync") != 1 {
		t.Errorf("/readyz: HTTP %d, want 200 with one informer-sync check:\n%s", code, body)
	}
	if code, body := a.get(t, "/livez"); code != http.StatusOK {
		t.Errorf("/livez: HTTP %d %s", code, body)
	}

	t.Run("discovery is static and does no I/O", func(t *testing.T) {
		// A metric request scrapes the pod on the spot (it was never scraped).
		a.value(t, "llm_saturation")
		if a.engine.Load() == 0 {
			t.Fatal("the HPA's pod was never scraped")
		}
		hits, actions := a.engine.Load(), len(a.fake.Actions())
		code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1")
		if code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", code, body)
		}
		var list metav1.APIResourceList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range list.APIResources {
			got = append(got, r.Name)
		}
		want := []string{"llm_saturation", "llm_demand_replicas", "llm_num_requests_waiting", "llm_num_requests_running", "llm_kv_cache_usage"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("discovery (-want +got):\n%s", diff)
		}
		if a.engine.Load() != hits || len(a.fake.Actions()) != actions {
			t.Errorf("discovery did I/O: engine requests %d → %d, API actions %d → %d", hits, a.engine.Load(), actions, len(a.fake.Actions()))
		}
	})

	t.Run("an External metric request", func(t *testing.T) {
		if got := a.value(t, "llm_saturation"); got != "7400m" {
			t.Errorf("llm_saturation = %s, want 7400m", got)
		}
	})

	t.Run("/metrics", func(t *testing.T) {
		code, body := a.get(t, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", code, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		// The API server's registry (with the Go collector) and the adapter's.
		for _, name := range []string{"go_goroutines", "apiserver_request_total", "saturation_adapter_scrape_duration_seconds"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("/metrics has no %s", name)
			}
		}
		gathered := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			out := make([]*dto.MetricFamily, 0, len(fams))
			for _, f := range fams {
				out = append(out, f)
			}
			slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
			return out, nil
		})
		// Normalised: the deterministic families of one External request by an HPA.
		const want = `
# HELP saturation_adapter_pool_pods Pods behind the last External answer to a HorizontalPodAutoscaler, by state (counted, unknown, held, and by engine state).
# TYPE saturation_adapter_pool_pods gauge
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="clipped"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="counted"} 1
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="frozen"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="held"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="sleeping"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="unknown"} 0
saturation_adapter_pool_pods{hpa="vllm",metric="llm_saturation",namespace="llm",state="wedged"} 0
# HELP saturation_adapter_requests_total External and per-pod metric requests, by metric and result (ok, not_found, no_pods, no_data, error).
# TYPE saturation_adapter_requests_total counter
saturation_adapter_requests_total{metric="llm_saturation",result="ok"} 2
# HELP saturation_adapter_scrape_targets Pods in the current scrape set.
# TYPE saturation_adapter_scrape_targets gauge
saturation_adapter_scrape_targets 1
# HELP saturation_adapter_served_value Last External metric value served to a HorizontalPodAutoscaler, by its namespace and name and the metric.
# TYPE saturation_adapter_served_value gauge
saturation_adapter_served_value{hpa="vllm",metric="llm_saturation",namespace="llm"} 7.4
`
		if err := testutil.GatherAndCompare(gathered, strings.NewReader(want), "saturation_adapter_pool_pods",
			"saturation_adapter_requests_total", "saturation_adapter_scrape_targets", "saturation_adapter_served_value"); err != nil {
			t.Error(err)
		}
	})

	t.Run("/metrics needs authorization", func(t *testing.T) {
		anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback
		defer anon.CloseIdleConnections()
		resp, err := anon.Get(a.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous /metrics: HTTP %d, want 401 or 403", resp.StatusCode)
		}
	})
}

// `adapter --version` prints the stamped version and exits without serving.
func TestVersionFlag(t *testing.T) {
	cmd := NewCommand(context.Background())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "saturation-adapter ") || !strings.Contains(out.String(), "commit ") {
		t.Errorf("--version printed %q", out.String())
	}
}

// `adapter --help` lists the adapter's flags in their groups.
func TestHelp(t *testing.T) {
	cmd := NewCommand(context.Background())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--queue-depth-set-point", "--scrape-interval", "--kubeconfig", "--secure-port", "Pod selection flags:", "--version",
		"adapter explain POD..."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	// The adapter's own groups come before the API server library's.
	if own, lib := strings.Index(out.String(), "Pod selection flags:"), strings.Index(out.String(), "Generic API server"); own < 0 || lib < 0 || own > lib {
		t.Errorf("--help: pod selection flags at %d, generic API server flags at %d: want the adapter's first", own, lib)
	}
	for _, gone := range []string{"--queue-depth-target", "--discovery-interval", "drain", "simulate", "calibrate"} {
		if strings.Contains(out.String(), gone) {
			t.Errorf("--help shows %q", gone)
		}
	}
}

// TestServerAndExplainAgree feeds the same /metrics bodies to the assembled
// server (one pod each) and to explain: both pool through policy.PoolBuilder,
// so their values agree exactly, in the milli units the server serves.
func TestServerAndExplainAgree(t *testing.T) {
	var files []string
	for _, f := range []string{"hazards/BC-06.prom", "hazards/BC-08.prom", "hazards/BC-09-window.prom",
		"samples/vllm_v1-0.10-nvcr25.09_single-engine.prom", "samples/sglang_v0.4-docs.prom", "samples/llm-d-inference-sim_v0.10.2_load.prom"} {
		files = append(files, filepath.Join("..", "..", "..", "testdata", f))
	}
	a := startAdapter(t, files...)
	a.waitReady(t)
	ex, err := Explain(files, NewScoringOptions(), ExplainOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for metric, v := range map[string]*float64{"llm_saturation": ex.Pool.Saturation, "llm_demand_replicas": ex.Pool.DemandReplicas} {
		want, err := provider.MilliQuantity(*v)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.value(t, metric); got != want.String() {
			t.Errorf("%s: server %s, explain %s", metric, got, want.String())
		}
	}
}

// TestConfigReload runs the assembled server on --config: a configured policy
// is served and listed; a changed file takes effect without a restart; a bad
// new file keeps the last good one and says so in /readyz?verbose and
// /metrics, while /readyz stays ready.
func TestConfigReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(s string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte("apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n"+s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("- {name: chat, kind: mean, terms: [{kind: queueDepth, setPoint: 10}]}\n")
	a := startAdapterWith(t, func(o *Options) { o.Scoring.ConfigFile = path },
		func(c *Config) { c.ConfigReloadInterval = 50 * time.Millisecond },
		filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom")) // 37 waiting, KV 0.97/0.02
	a.waitReady(t)
	if got := a.value(t, "chat"); got != "3700m" {
		t.Errorf("chat = %s, want 3700m (37 waiting / 10)", got)
	}
	discovery := func() string {
		_, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1")
		return string(body)
	}
	if d := discovery(); !strings.Contains(d, `"name":"chat"`) || !strings.Contains(d, `"name":"llm_saturation"`) {
		t.Errorf("discovery lacks chat or the built-ins: %s", d)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

	write("- {name: chat-v2, kind: demand, terms: [{kind: queueDepth, setPoint: 37}]}\n")
	waitFor("chat-v2 to replace chat", func() bool {
		d := discovery()
		return strings.Contains(d, `"name":"chat-v2"`) && !strings.Contains(d, `"name":"chat"`)
	})
	if got := a.value(t, "chat-v2"); got != "1" {
		t.Errorf("chat-v2 = %s, want 1", got)
	}

	write("- {name: Chat, kind: mean}\n")
	waitFor("the bad reload to show in /readyz?verbose", func() bool {
		code, body := a.get(t, "/readyz?verbose")
		return code == http.StatusOK && strings.Contains(string(body), "[+]policy-config-reload-failed ok")
	})
	if _, body := a.get(t, "/metrics"); !strings.Contains(string(body), "saturation_adapter_config_last_reload_successful 0") {
		t.Error("/metrics does not say the last reload failed")
	}
	if got := a.value(t, "chat-v2"); got != "1" {
		t.Errorf("after a bad file chat-v2 = %s, want the last good catalog", got)
	}
	if code, _ := a.get(t, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d after a bad reload, want 200: every replica reads the same file", code)
	}
}

// caProvider is a request-header CA that a test loads when it wants.
type caProvider struct{ ca atomic.Pointer[[]byte] }

func (p *caProvider) Name() string { return "test-request-header-ca" }
func (p *caProvider) CurrentCABundleContent() []byte {
	if b := p.ca.Load(); b != nil {
		return *b
	}
	return nil
}
func (p *caProvider) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }
func (p *caProvider) AddListener(dynamiccertificates.Listener)  {}

// Issue 12, faults 6: the adapter reported ready while delegated
// authentication had not loaded the aggregator's client CA yet (it loads from
// a ConfigMap after start), and callers through the aggregator got 403 for
// about half a second. Ready now waits for it.
func TestNotReadyBeforeAuthenticationLoads(t *testing.T) {
	ca := &caProvider{}
	a := startAdapterWith(t, nil, func(c *Config) {
		none := headerrequest.StaticStringSlice(nil)
		c.Generic.Authentication.RequestHeaderConfig = &authenticatorfactory.RequestHeaderConfig{CAContentProvider: ca,
			UsernameHeaders: none, UIDHeaders: none, GroupHeaders: none, ExtraHeaderPrefixes: none, AllowedClientNames: none}
	}, filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom"))
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := a.client.Get(a.base + "/readyz?verbose")
		if err != nil {
			return false, nil // not serving yet
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "[+]informer-sync ok"), nil
	}); err != nil {
		t.Fatal("the caches never synced")
	}
	if code, body := a.get(t, "/readyz?verbose"); code == http.StatusOK || !strings.Contains(string(body), "[-]delegated-authentication failed") {
		t.Errorf("/readyz: HTTP %d before the request-header CA loaded, want not ready:\n%s", code, body)
	}
	pem := []byte("-----BEGIN CERTIFICATE-----\n...\n")
	ca.ca.Store(&pem)
	a.waitReady(t)
}

// Issue 12, faults 6: before the pod cache syncs, a request is answered 503
// "the adapter is starting", never 404 "no pods match" (a guess the HPA would
// show as a misconfigured selector).
func TestStartingAnswers503(t *testing.T) {
	release := make(chan struct{})
	a := startAdapterWith(t, nil, func(c *Config) {
		c.Client.(*fake.Clientset).PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
			<-release // the first list of pods hangs until the test lets it go
			return false, nil, nil
		})
	}, filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom"))
	t.Cleanup(func() { close(release) })
	path := "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?labelSelector=" + url.QueryEscape("app=vllm")
	var code int
	var body []byte
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := a.client.Get(a.base + path)
		if err != nil {
			return false, nil // not serving yet
		}
		defer resp.Body.Close()
		code = resp.StatusCode
		body, _ = io.ReadAll(resp.Body)
		return true, nil
	}); err != nil {
		t.Fatal("the adapter never answered")
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "the adapter is starting") {
		t.Errorf("before the pod cache synced: HTTP %d %s, want 503 saying the adapter is starting", code, body)
	}
	if code, _ := a.get(t, "/readyz"); code == http.StatusOK {
		t.Error("/readyz is ready before the pod cache synced")
	}
}
