package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

func TestCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA(dir, "ca", "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)

	srv, err := ca.Serving(dir, "srv", []string{"localhost", "svc.ns.svc"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(srv.CertFile, srv.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "svc.ns.svc", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}

	cl, err := ca.Client(dir, "cl", "alice", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	pair, err = tls.LoadX509KeyPair(cl.CertFile, cl.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ = x509.ParseCertificate(pair.Certificate[0])
	if leaf.Subject.CommonName != "alice" || len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != "system:masters" {
		t.Errorf("client subject %v, want CN=alice O=system:masters", leaf.Subject)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if leaf.SerialNumber.Cmp(ca.Cert.SerialNumber) == 0 {
		t.Error("leaf and CA share a serial number")
	}
}
