package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// TestManagedCertificateRotation: the default install's TLS mode on a real aggregator.
// The stack already waited until the aggregator verified the adapter with the caBundle the
// adapter wrote itself (no cluster CA, no insecureSkipTLSVerify). With a one-minute serving
// certificate, the adapter renews it (with a third of its validity left, ~40 s) and serves
// the new one without a restart; once the first has expired, the aggregator still reaches
// the adapter and the External metrics API still answers.
func TestManagedCertificateRotation(t *testing.T) {
	t.Parallel()
	s := startStack(t, stack.Options{Adapter: stack.AdapterOptions{
		ExtraArgs: []string{"--tls-managed-serving-validity=1m", "--tls-managed-ca-validity=3m"},
	}})
	ctx := context.Background()
	agg, err := aggregator.NewForConfig(s.Cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	pid := s.Adapter.Process.PID()

	// served dials the adapter as the aggregator does: the APIService's caBundle as the
	// only root, the Service's DNS name as the server name.
	served := func() (*x509.Certificate, error) {
		api, err := agg.ApiregistrationV1().APIServices().Get(ctx, stack.APIServiceName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if api.Spec.InsecureSkipTLSVerify {
			t.Fatal("the APIService skips TLS verification")
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(api.Spec.CABundle) {
			t.Fatalf("the APIService's caBundle holds no certificate: %q", api.Spec.CABundle)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp",
			net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Adapter.Port)),
			&tls.Config{RootCAs: roots, ServerName: stack.AdapterService + "." + stack.AdapterNamespace + ".svc"})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	first, err := served()
	if err != nil {
		t.Fatalf("verifying the adapter with the published caBundle: %v", err)
	}
	// NotBefore is backdated (clock skew between nodes), so the validity left is what
	// --tls-managed-serving-validity sets.
	if left := time.Until(first.NotAfter); left > 2*time.Minute {
		t.Fatalf("serving certificate valid for %s more, want about 1m (--tls-managed-serving-validity)", left)
	}

	var renewed *x509.Certificate
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		c, err := served()
		if err != nil {
			t.Logf("dial: %v", err)
			return false, nil
		}
		renewed = c
		return c.SerialNumber.Cmp(first.SerialNumber) != 0, nil
	}); err != nil {
		t.Fatalf("the serving certificate (serial %s, expires %s) was not renewed: %v", first.SerialNumber, first.NotAfter, err)
	}
	if s.Adapter.Process.PID() != pid {
		t.Fatal("the adapter restarted")
	}
	if exited, _ := s.Adapter.Process.Exited(); exited {
		t.Fatal("the adapter exited")
	}
	// The Secret holds what is served, for the other replica.
	secret, err := s.Cluster.Client.CoreV1().Secrets(stack.AdapterNamespace).Get(ctx, stack.ServingCertSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if block, _ := pem.Decode(secret.Data["tls.crt"]); block == nil || !bytes.Equal(block.Bytes, renewed.Raw) {
		t.Error("the Secret's tls.crt is not the certificate served")
	}

	// After the first certificate expired: the aggregator reports the APIService Available
	// and proxies the External metrics API's discovery.
	time.Sleep(time.Until(first.NotAfter.Add(2 * time.Second)))
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		api, err := agg.ApiregistrationV1().APIServices().Get(ctx, stack.APIServiceName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range api.Status.Conditions {
			if c.Type == apiregv1.Available && c.Status != apiregv1.ConditionTrue {
				t.Logf("APIService %s: %s", c.Reason, c.Message)
				return false, nil
			}
		}
		_, err = s.Cluster.Kubectl(ctx, "get", "--raw", "/apis/external.metrics.k8s.io/v1beta1")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("after the first certificate expired, the aggregator did not reach the adapter: %v", err)
	}
}
