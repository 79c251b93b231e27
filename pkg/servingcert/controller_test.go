package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/apiservice"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	ns            = "saturation-adapter"
	secretName    = "saturation-adapter-tls"
	serverName    = "saturation-adapter.saturation-adapter.svc"
	customMetrics = "v1beta2.custom.metrics.k8s.io"
	day           = 24 * time.Hour
)

var self = apiservice.Service{Namespace: ns, Name: "saturation-adapter"}

func testConfig() Config {
	o := NewOptions()
	o.SecretName = secretName
	return o.Config(&apiservice.Options{Namespace: ns, Service: self.Name})
}

// apiService returns an APIService routed to svc, as installed with
// insecureSkipTLSVerify (the state before the managed mode takes over).
func apiService(name string, svc apiservice.Service) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"group": strings.SplitN(name, ".", 2)[1], "version": strings.SplitN(name, ".", 2)[0],
			"insecureSkipTLSVerify": true, "groupPriorityMinimum": int64(100), "versionPriority": int64(100),
			"service": map[string]any{"namespace": svc.Namespace, "name": svc.Name, "port": int64(443)},
		},
	}}
}

// cluster is what the replicas share: the API server's Secrets and APIServices.
type cluster struct {
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	clock  *clocktesting.FakeClock
}

func newCluster(apiServices ...runtime.Object) *cluster {
	if len(apiServices) == 0 {
		apiServices = []runtime.Object{apiService(apiservice.ExternalMetrics, self)}
	}
	return &cluster{
		client: fake.NewClientset(),
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{apiservice.Resource: "APIServiceList"}, apiServices...),
		clock: clocktesting.NewFakeClock(t0),
	}
}

// replica returns one adapter replica's controller.
func (c *cluster) replica(t *testing.T) *Controller {
	t.Helper()
	ctl, err := New(testConfig(), c.client,
		apiservice.NewPublisher(c.dyn, []string{apiservice.ExternalMetrics, customMetrics}, self), c.clock)
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

func (c *cluster) secret(t *testing.T) *corev1.Secret {
	t.Helper()
	s, err := c.client.CoreV1().Secrets(ns).Get(context.Background(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// caBundle returns an APIService's spec.caBundle: what the aggregator verifies with.
func (c *cluster) caBundle(t *testing.T, name string) []byte {
	t.Helper()
	u, err := c.dyn.Resource(apiservice.Resource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle")
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	if skip, _, _ := unstructured.NestedBool(u.Object, "spec", "insecureSkipTLSVerify"); skip && len(b) > 0 {
		t.Errorf("APIService %s has a caBundle and insecureSkipTLSVerify true", name)
	}
	return b
}

func (c *cluster) writes() (creates, updates int) {
	for _, a := range c.client.Actions() {
		switch a.GetVerb() {
		case "create":
			creates++
		case "update":
			updates++
		}
	}
	return
}

// verify checks the serving certificate as the aggregator does: chain to a CA
// of bundle, for the Service's DNS name, at now.
func verify(certPEM, bundle []byte, now time.Time) error {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return errors.New("no CA in the bundle")
	}
	_, err = certs[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: serverName, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func leaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func bundleNames(t *testing.T, bundle []byte) []string {
	t.Helper()
	cas, err := certutil.ParseCertsPEM(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return commonNames(cas)
}

type countingListener struct{ n atomic.Int32 }

func (l *countingListener) Enqueue() { l.n.Add(1) }

func TestFirstStartCreates(t *testing.T) {
	c := newCluster(apiService(apiservice.ExternalMetrics, self), apiService(customMetrics, self))
	ctl := c.replica(t)
	if cert, key := ctl.CurrentCertKeyContent(); cert != nil || key != nil {
		t.Fatal("content before the first sync")
	}
	l := &countingListener{}
	ctl.AddListener(l)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}

	s := c.secret(t)
	if s.Type != corev1.SecretTypeTLS || s.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("Secret type %q, labels %v; want kubernetes.io/tls and %s=%s", s.Type, s.Labels, ManagedByLabel, ManagedByValue)
	}
	if diff := cmp.Diff([]string{"ca.crt", "ca.key", "tls.crt", "tls.key"}, slices.Sorted(maps.Keys(s.Data))); diff != "" {
		t.Errorf("Secret keys (-want +got):\n%s", diff)
	}
	cert, key := ctl.CurrentCertKeyContent()
	if !bytes.Equal(cert, s.Data["tls.crt"]) || !bytes.Equal(key, s.Data["tls.key"]) || !bytes.Equal(ctl.CABundle(), s.Data["ca.crt"]) {
		t.Error("served content differs from the Secret")
	}
	if l.n.Load() != 1 {
		t.Errorf("listener told %d times, want 1", l.n.Load())
	}
	crt := leaf(t, cert)
	if diff := cmp.Diff([]string{serverName, serverName + ".cluster.local"}, crt.DNSNames); diff != "" {
		t.Errorf("DNS names (-want +got):\n%s", diff)
	}
	if got := crt.NotAfter.Sub(t0); got != DefaultServingValidity {
		t.Errorf("serving validity from now %s, want %s", got, DefaultServingValidity)
	}
	if crt.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("serving key %s, want ECDSA", crt.PublicKeyAlgorithm)
	}
	for _, name := range []string{apiservice.ExternalMetrics, customMetrics} {
		if b := c.caBundle(t, name); !bytes.Equal(b, s.Data["ca.crt"]) {
			t.Errorf("APIService %s caBundle is not the Secret's ca.crt", name)
		}
		if err := verify(cert, c.caBundle(t, name), t0); err != nil {
			t.Errorf("serving certificate does not verify with APIService %s's caBundle: %v", name, err)
		}
	}
	// A verifier whose clock is a few minutes behind still accepts it.
	if err := verify(cert, ctl.CABundle(), t0.Add(-5*time.Minute)); err != nil {
		t.Errorf("verifier 5 minutes behind: %v", err)
	}
}

func TestSecondReplicaAdopts(t *testing.T) {
	c := newCluster()
	a, b := c.replica(t), c.replica(t)
	if err := a.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.client.ClearActions()
	if err := b.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if creates, updates := c.writes(); creates+updates != 0 {
		t.Errorf("second replica wrote %d creates, %d updates; want none", creates, updates)
	}
	ac, ak := a.CurrentCertKeyContent()
	bc, bk := b.CurrentCertKeyContent()
	if !bytes.Equal(ac, bc) || !bytes.Equal(ak, bk) || !bytes.Equal(a.CABundle(), b.CABundle()) {
		t.Error("replicas serve different certificates")
	}
}

// winner returns the Secret another replica wrote: the first replica's sync on a
// private copy of the cluster, at the same time.
func winner(t *testing.T, c *cluster, existing *corev1.Secret) *corev1.Secret {
	t.Helper()
	other := newCluster()
	other.clock.SetTime(c.clock.Now())
	if existing != nil {
		if err := other.client.Tracker().Add(existing.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.replica(t).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	return other.secret(t)
}

func TestConcurrentCreateAdoptsTheWinner(t *testing.T) {
	c := newCluster()
	won := winner(t, c, nil)
	c.client.PrependReactor("create", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		// The other replica's Create lands first.
		if err := c.client.Tracker().Add(won.DeepCopy()); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), secretName)
	})
	ctl := c.replica(t)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatalf("RunOnce() = %v, want the winner adopted", err)
	}
	if cert, _ := ctl.CurrentCertKeyContent(); !bytes.Equal(cert, won.Data["tls.crt"]) {
		t.Error("serving its own certificate, not the winner's")
	}
	if got := c.secret(t).Data; !bytes.Equal(got["ca.key"], won.Data["ca.key"]) {
		t.Error("the winner's Secret was overwritten")
	}
}

func TestUpdateConflictIsRetried(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.clock.Step(DefaultServingValidity - DefaultServingValidity/renewDivisor + day) // renewal due
	won := winner(t, c, c.secret(t))
	if bytes.Equal(won.Data["tls.crt"], c.secret(t).Data["tls.crt"]) {
		t.Fatal("the other replica did not rotate")
	}
	won.ResourceVersion = "2"
	conflicts := 0
	c.client.PrependReactor("update", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			return false, nil, nil
		}
		conflicts++
		// The other replica's rotation lands between our read and our write.
		if err := c.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("secrets"), won.DeepCopy(), ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewConflict(corev1.Resource("secrets"), secretName, errors.New("the object has been modified"))
	})
	c.client.ClearActions()
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatalf("RunOnce() = %v, want the conflict retried", err)
	}
	if _, updates := c.writes(); updates != 1 {
		t.Errorf("%d updates, want 1 (the conflicting one; the re-read finds the rotation done)", updates)
	}
	if cert, _ := ctl.CurrentCertKeyContent(); !bytes.Equal(cert, won.Data["tls.crt"]) {
		t.Error("after the conflict, not serving the other replica's certificate")
	}
}

func TestRenewsNearExpiryAndTellsListeners(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	l := &countingListener{}
	ctl.AddListener(l)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	first, _ := ctl.CurrentCertKeyContent()
	bundle := ctl.CABundle()

	// Two thirds of the way through: nothing to do.
	c.clock.Step(DefaultServingValidity - DefaultServingValidity/renewDivisor - day)
	c.client.ClearActions()
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, updates := c.writes(); updates != 0 || l.n.Load() != 1 {
		t.Errorf("before the renewal point: %d updates, listener told %d times; want 0 and 1", updates, l.n.Load())
	}

	// Less than a third left: renewed by the same CA, listeners told.
	c.clock.Step(2 * day)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	second, _ := ctl.CurrentCertKeyContent()
	if bytes.Equal(first, second) || l.n.Load() != 2 {
		t.Fatalf("not renewed (listener told %d times)", l.n.Load())
	}
	if !bytes.Equal(ctl.CABundle(), bundle) {
		t.Error("the CA bundle changed on a serving renewal")
	}
	if got := leaf(t, second).NotAfter.Sub(c.clock.Now()); got != DefaultServingValidity {
		t.Errorf("renewed certificate valid for %s, want %s", got, DefaultServingValidity)
	}
	if err := verify(second, c.caBundle(t, apiservice.ExternalMetrics), c.clock.Now()); err != nil {
		t.Errorf("renewed certificate does not verify with the APIService's caBundle: %v", err)
	}
}

// Twenty years of two replicas, in steps that cross every renewal and grace
// period: whenever a replica serves a certificate, the aggregator's caBundle
// verifies it, including between one replica's rotation and the other's reload.
func TestRotationNeverBreaksVerification(t *testing.T) {
	c := newCluster()
	replicas := []*Controller{c.replica(t), c.replica(t)}
	steps := []time.Duration{29 * day, time.Minute, 5 * time.Minute, 11 * time.Minute}
	seenCAs := map[string]bool{}
	maxBundle := 0
	for i := 0; c.clock.Now().Before(t0.Add(20 * 365 * day)); i++ {
		for r, ctl := range replicas {
			if err := ctl.RunOnce(context.Background()); err != nil {
				t.Fatalf("%s: replica %d: %v", c.clock.Now().Format(time.DateOnly), r, err)
			}
			// The other replica has not reloaded yet: both must verify.
			bundle := c.caBundle(t, apiservice.ExternalMetrics)
			for q, other := range replicas {
				if cert, _ := other.CurrentCertKeyContent(); cert != nil {
					if err := verify(cert, bundle, c.clock.Now()); err != nil {
						t.Fatalf("%s: after replica %d synced, replica %d's certificate fails: %v (bundle %v)",
							c.clock.Now().Format(time.RFC3339), r, q, err, bundleNames(t, bundle))
					}
				}
			}
			names := bundleNames(t, bundle)
			maxBundle = max(maxBundle, len(names))
			for _, n := range names {
				seenCAs[n] = true
			}
		}
		c.clock.Step(steps[i%len(steps)])
	}
	// CAs made at 0, ~6.7 and ~13.3 years, the last replaced at ~20.
	if len(seenCAs) < 3 || maxBundle != 2 {
		t.Errorf("saw %d CAs, at most %d in the bundle; want >= 3 and 2 (overlap)", len(seenCAs), maxBundle)
	}
	if n := len(bundleNames(t, c.caBundle(t, apiservice.ExternalMetrics))); n != 1 {
		t.Errorf("bundle holds %d CAs at the end, want 1 (the old one removed)", n)
	}
}

// advanceTo moves the clock to end in 30-day steps, syncing after each (the
// last sync may fail: the caller checks what it expects).
func advanceTo(t *testing.T, c *cluster, ctl *Controller, end time.Time) {
	t.Helper()
	for c.clock.Now().Before(end) {
		c.clock.SetTime(minTime(c.clock.Now().Add(30*day), end))
		err := ctl.RunOnce(context.Background())
		if err != nil && c.clock.Now().Before(end) {
			t.Fatalf("%s: %v", c.clock.Now().Format(time.DateOnly), err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// A CA rotation step by step: the new CA joins the bundle, signs only after the
// grace period, and the old one leaves a grace period after that.
func TestCARotationKeepsBothCAs(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	l := &countingListener{}
	ctl.AddListener(l)
	sync := func() {
		t.Helper()
		if err := ctl.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	oldCA := bundleNames(t, ctl.CABundle())[0]

	// Months go by (serving renewals), up to just inside the CA's last third.
	advanceTo(t, c, ctl, t0.Add(DefaultCAValidity-DefaultCAValidity/renewDivisor+day))
	bundle := bundleNames(t, c.caBundle(t, apiservice.ExternalMetrics))
	if len(bundle) != 2 || bundle[1] != oldCA {
		t.Fatalf("bundle after the CA rotation %v, want [new, %s]", bundle, oldCA)
	}
	newCA := bundle[0]
	cert, _ := ctl.CurrentCertKeyContent()
	if got := leaf(t, cert).Issuer.CommonName; got != oldCA {
		t.Errorf("serving certificate issued by %s right after the CA rotation, want still %s", got, oldCA)
	}

	c.clock.Step(5 * time.Minute) // within the grace period
	sync()
	cert, _ = ctl.CurrentCertKeyContent()
	if got := leaf(t, cert).Issuer.CommonName; got != oldCA {
		t.Errorf("serving certificate issued by %s within the grace period, want still %s", got, oldCA)
	}

	c.clock.Step(6 * time.Minute) // past it
	sync()
	cert, _ = ctl.CurrentCertKeyContent()
	if got := leaf(t, cert).Issuer.CommonName; got != newCA {
		t.Errorf("serving certificate issued by %s after the grace period, want %s", got, newCA)
	}
	if got := bundleNames(t, c.caBundle(t, apiservice.ExternalMetrics)); len(got) != 2 {
		t.Errorf("bundle %v right after the switch, want both CAs", got)
	}

	c.clock.Step(11 * time.Minute)
	sync()
	if got := bundleNames(t, c.caBundle(t, apiservice.ExternalMetrics)); !cmp.Equal(got, []string{newCA}) {
		t.Errorf("bundle %v a grace period after the switch, want only %s", got, newCA)
	}
	if err := verify(cert, c.caBundle(t, apiservice.ExternalMetrics), c.clock.Now()); err != nil {
		t.Error(err)
	}
}

// A new CA does not sign while the APIService cannot be updated: the serving
// certificate signed by the old CA keeps being served.
func TestCARotationWaitsForPublication(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	oldCA := bundleNames(t, ctl.CABundle())[0]
	c.dyn.PrependReactor("update", "apiservices", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: apiservice.Resource.Group, Resource: "apiservices"}, apiservice.ExternalMetrics, errors.New("RBAC"))
	})
	advanceTo(t, c, ctl, t0.Add(DefaultCAValidity-DefaultCAValidity/renewDivisor+day))
	for range 3 {
		if err := ctl.RunOnce(context.Background()); err == nil || !apierrors.IsForbidden(err) {
			t.Fatalf("RunOnce() = %v, want the Forbidden publication error", err)
		}
		c.clock.Step(time.Hour)
	}
	cert, _ := ctl.CurrentCertKeyContent()
	if got := leaf(t, cert).Issuer.CommonName; got != oldCA {
		t.Errorf("serving certificate issued by %s while the new CA is unpublished, want %s", got, oldCA)
	}
	if err := verify(cert, c.caBundle(t, apiservice.ExternalMetrics), c.clock.Now()); err != nil {
		t.Errorf("the aggregator's (old) bundle no longer verifies: %v", err)
	}
}

func TestCorruptSecretIsRefused(t *testing.T) {
	good := winner(t, newCluster(), nil)
	other := winner(t, newCluster(), nil)
	tests := []struct {
		name   string
		mutate func(*corev1.Secret)
		want   string
	}{
		{"missing key", func(s *corev1.Secret) { delete(s.Data, "ca.key") }, "key ca.key is missing"},
		{"garbage certificate", func(s *corev1.Secret) { s.Data["tls.crt"] = []byte("not PEM") }, "tls.crt"},
		{"serving key of another pair", func(s *corev1.Secret) { s.Data["tls.key"] = other.Data["tls.key"] }, "tls.key does not match tls.crt"},
		{"CA key of another CA", func(s *corev1.Secret) { s.Data["ca.key"] = other.Data["ca.key"] }, "ca.key matches no certificate of ca.crt"},
		{"serving certificate of another CA", func(s *corev1.Secret) {
			s.Data["tls.crt"], s.Data["tls.key"] = other.Data["tls.crt"], other.Data["tls.key"]
		}, "no CA of ca.crt signed tls.crt"},
		{"someone else's TLS Secret (no label)", func(s *corev1.Secret) { s.Labels = map[string]string{"app": "cert-manager"} },
			"lacks type kubernetes.io/tls and label app.kubernetes.io/managed-by=saturation-adapter"},
		{"an Opaque Secret of that name", func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }, "type Opaque"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster()
			bad := good.DeepCopy()
			tt.mutate(bad)
			if err := c.client.Tracker().Add(bad); err != nil {
				t.Fatal(err)
			}
			err := c.replica(t).RunOnce(context.Background())
			if err == nil || !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "refusing to overwrite it") || !strings.Contains(err.Error(), "kubectl -n saturation-adapter delete secret saturation-adapter-tls") {
				t.Errorf("RunOnce() = %v\nwant errCorrupt naming %q, the refusal and the fix", err, tt.want)
			}
			if creates, updates := c.writes(); creates+updates != 0 {
				t.Errorf("%d creates, %d updates; want the Secret left alone", creates, updates)
			}
			if diff := cmp.Diff(bad.Data, c.secret(t).Data); diff != "" {
				t.Errorf("Secret changed (-before +after):\n%s", diff)
			}
		})
	}
}

// A replica that already serves keeps serving when the Secret gets damaged.
func TestCorruptionKeepsServingTheLoadedCertificate(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, _ := ctl.CurrentCertKeyContent()
	s := c.secret(t)
	s.Data["tls.key"] = []byte("oops")
	if _, err := c.client.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ctl.RunOnce(context.Background()); !errors.Is(err, errCorrupt) {
		t.Fatalf("RunOnce() = %v, want errCorrupt", err)
	}
	if after, _ := ctl.CurrentCertKeyContent(); !bytes.Equal(before, after) {
		t.Error("the loaded certificate was dropped")
	}
}

func TestCABundleOnlyToOwnedAPIServices(t *testing.T) {
	keda := apiservice.Service{Namespace: "keda", Name: "keda-metrics-apiserver"}
	c := newCluster(apiService(apiservice.ExternalMetrics, self), apiService(customMetrics, keda))
	ctl := c.replica(t)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.caBundle(t, apiservice.ExternalMetrics), ctl.CABundle()) {
		t.Error("owned APIService lacks the CA bundle")
	}
	u, err := c.dyn.Resource(apiservice.Resource).Get(context.Background(), customMetrics, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(apiService(customMetrics, keda).Object["spec"], u.Object["spec"]); diff != "" {
		t.Errorf("KEDA's APIService changed (-want +got):\n%s", diff)
	}
}

// The controller as k8s.io/apiserver runs it: SecureServingInfo.Serve calls
// RunOnce, starts Run and reloads on the listener. A client verifying with the
// APIService's caBundle connects before and after a rotation, with no restart.
func TestServedByGenericAPIServerAcrossRotation(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	info := &server.SecureServingInfo{Listener: ln, Cert: ctl}
	_, stopped, err := info.Serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }), time.Second, stop)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { close(stop); <-stopped }()

	handshake := func() (*x509.Certificate, error) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(c.caBundle(t, apiservice.ExternalMetrics))
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: serverName, Time: c.clock.Now})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	first, err := handshake()
	if err != nil {
		t.Fatalf("handshake with the APIService's caBundle: %v", err)
	}

	// Wait for Run's ticker, then move past the renewal point.
	deadline := time.Now().Add(30 * time.Second)
	for !c.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
		time.Sleep(time.Millisecond)
	}
	c.clock.Step(DefaultServingValidity - DefaultServingValidity/renewDivisor + day)
	for {
		got, err := handshake()
		if err != nil {
			t.Fatalf("handshake during the rotation: %v", err)
		}
		if got.SerialNumber.Cmp(first.SerialNumber) != 0 {
			if got.NotAfter.Sub(c.clock.Now()) != DefaultServingValidity {
				t.Errorf("served certificate valid until %v, want a fresh one", got.NotAfter)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not served")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run watches the Secret: deleting it starts over with a new CA at once.
func TestRunRecreatesADeletedSecret(t *testing.T) {
	c := newCluster()
	ctl := c.replica(t)
	if err := ctl.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	oldBundle := ctl.CABundle()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, 1) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	watching := func() bool {
		for _, a := range c.client.Actions() {
			if w, ok := a.(clienttesting.WatchActionImpl); ok && w.GetResource().Resource == "secrets" &&
				w.WatchRestrictions.Fields.String() == "metadata.name="+secretName {
				return true
			}
		}
		return false
	}
	for !watching() { // the informer watches the one Secret by name
		if time.Now().After(deadline) {
			t.Fatal("Run does not watch the Secret")
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.client.CoreV1().Secrets(ns).Delete(context.Background(), secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for bytes.Equal(ctl.CABundle(), oldBundle) {
		if time.Now().After(deadline) {
			t.Fatal("the deleted Secret was not recreated")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := c.secret(t); !bytes.Equal(s.Data["ca.crt"], ctl.CABundle()) {
		t.Error("served bundle differs from the recreated Secret")
	}
	for !bytes.Equal(c.caBundle(t, apiservice.ExternalMetrics), ctl.CABundle()) {
		if time.Now().After(deadline) {
			t.Fatal("the new CA was not published")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOptionsValidate(t *testing.T) {
	id := &apiservice.Options{Namespace: ns, Service: self.Name, APIServices: []string{apiservice.ExternalMetrics}}
	tests := []struct {
		name    string
		mutate  func(*Options, *apiservice.Options)
		tlsFile string
		want    []string
	}{
		{"disabled", func(o *Options, _ *apiservice.Options) { o.SecretName = "" }, "", nil},
		{"defaults", func(*Options, *apiservice.Options) {}, "", nil},
		{"bad name, short validity", func(o *Options, _ *apiservice.Options) { o.SecretName = "Bad_Name"; o.ServingValidity = time.Second },
			"", []string{"--tls-managed-secret=Bad_Name", "--tls-managed-serving-validity=1s"}},
		{"CA shorter than 3 serving", func(o *Options, _ *apiservice.Options) { o.CAValidity = 2 * DefaultServingValidity },
			"", []string{"--tls-managed-ca-validity=17520h0m0s: must be at least 3 × --tls-managed-serving-validity (26280h0m0s)"}},
		{"no namespace", func(_ *Options, id *apiservice.Options) { id.Namespace = "" }, "", []string{"--adapter-namespace"}},
		{"with --tls-cert-file", func(*Options, *apiservice.Options) {}, "/etc/tls/tls.crt",
			[]string{"--tls-managed-secret=saturation-adapter-tls and --tls-cert-file=/etc/tls/tls.crt: choose one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.SecretName = secretName
			idc := *id
			tt.mutate(o, &idc)
			errs := o.Validate(&idc, tt.tlsFile)
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors naming %q", errs, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to name %q", i, errs[i], w)
				}
			}
		})
	}
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	for _, mutate := range []func(*Config){
		func(c *Config) { c.Namespace = "" },
		func(c *Config) { c.DNSNames = nil },
		func(c *Config) { c.CAValidity = c.ServingValidity },
	} {
		cfg := testConfig()
		mutate(&cfg)
		if _, err := New(cfg, fake.NewClientset(), nil, clk); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}

// During a rollout that renames the Service, old and new replicas share the
// Secret: the new one adds its names once, keeping the old ones, and neither
// renews back and forth.
func TestServiceRenameDoesNotPingPong(t *testing.T) {
	c := newCluster()
	old := c.replica(t)
	renamedCfg := testConfig()
	renamedCfg.DNSNames = DNSNames(apiservice.Service{Namespace: ns, Name: "llm-adapter"})
	renamed, err := New(renamedCfg, c.client, nil, c.clock)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.client.ClearActions()
	for range 5 {
		for _, ctl := range []*Controller{renamed, old} {
			if err := ctl.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		c.clock.Step(time.Minute)
	}
	if _, updates := c.writes(); updates != 1 {
		t.Errorf("%d updates, want 1 (the renamed replica adds its names once)", updates)
	}
	cert, _ := old.CurrentCertKeyContent()
	want := []string{"llm-adapter.saturation-adapter.svc", "llm-adapter.saturation-adapter.svc.cluster.local", serverName, serverName + ".cluster.local"}
	if diff := cmp.Diff(want, leaf(t, cert).DNSNames); diff != "" {
		t.Errorf("DNS names (-want +got):\n%s", diff)
	}
	if err := verify(cert, old.CABundle(), c.clock.Now()); err != nil {
		t.Errorf("old name no longer verifies: %v", err)
	}
}
