package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// newClientPKI writes a client CA to caFile and returns a client certificate
// it signed, in group system:masters (which delegated authorization allows
// without a SubjectAccessReview), as the aggregator's front-proxy certificate
// is signed by the CA the adapter trusts.
func newClientPKI(caFile string) (tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "benchscale-client-ca"}, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	caPEM, err := certutil.EncodeCertificates(ca)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := certutil.WriteCert(caFile, caPEM); err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "benchscale", Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM, err := certutil.EncodeCertificates(&x509.Certificate{Raw: der})
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
