package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// CA is a certificate authority generated for one test cluster. Its key never leaves the
// process; only the certificate is written to disk.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	// CertFile is the PEM file holding Cert.
	CertFile string
}

// KeyPair is a leaf certificate and its key, both as PEM and as files.
type KeyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// NewCA creates a self-signed CA named name (client-go's certutil.NewSelfSignedCACert)
// and writes its certificate to dir/<file>.crt.
func NewCA(dir, file, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: name}, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", name, err)
	}
	ca := &CA{Cert: cert, Key: key, CertFile: filepath.Join(dir, file+".crt")}
	if ca.CertPEM, err = certutil.EncodeCertificates(cert); err != nil {
		return nil, err
	}
	if err := certutil.WriteCert(ca.CertFile, ca.CertPEM); err != nil {
		return nil, err
	}
	return ca, nil
}

// Serving issues a TLS server certificate for the given names and IPs, written to
// dir/<file>.crt and dir/<file>.key.
func (ca *CA) Serving(dir, file string, hosts []string, ips []net.IP) (*KeyPair, error) {
	return ca.issue(dir, file, pkix.Name{CommonName: hosts[0]}, hosts, ips, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate for user in the given groups (the API server maps CN
// to the user name and O to groups).
func (ca *CA) Client(dir, file, user string, groups ...string) (*KeyPair, error) {
	return ca.issue(dir, file, pkix.Name{CommonName: user, Organization: groups}, nil, nil, x509.ExtKeyUsageClientAuth)
}

// issue signs a leaf certificate with the CA. client-go's certutil makes CAs and
// self-signed pairs only, so the leaf is built with crypto/x509; keys and files go
// through keyutil and certutil.
func (ca *CA) issue(dir, file string, subject pkix.Name, hosts []string, ips []net.IP, usage x509.ExtKeyUsage) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	// A random 127-bit serial: certificates never collide without a shared counter.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial.Add(serial, big.NewInt(1)),
		Subject:               subject,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
		DNSNames:              hosts,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", subject.CommonName, err)
	}
	kp := &KeyPair{CertFile: filepath.Join(dir, file+".crt"), KeyFile: filepath.Join(dir, file+".key")}
	if kp.CertPEM, err = certutil.EncodeCertificates(&x509.Certificate{Raw: der}); err != nil {
		return nil, err
	}
	if kp.KeyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, err
	}
	if err := certutil.WriteCert(kp.CertFile, kp.CertPEM); err != nil {
		return nil, err
	}
	if err := keyutil.WriteKey(kp.KeyFile, kp.KeyPEM); err != nil {
		return nil, err
	}
	return kp, nil
}

// writeServiceAccountKey writes an ECDSA key for signing service-account tokens (ES256)
// to dir/sa.key and its public key to dir/sa.pub.
func writeServiceAccountKey(dir string) (keyFile, pubFile string, err error) {
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return "", "", err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.(crypto.Signer).Public())
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := keyutil.WriteKey(keyFile, keyPEM); err != nil {
		return "", "", err
	}
	if err := keyutil.WriteKey(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, nil
}
