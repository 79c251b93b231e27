package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority generated for one test cluster. Its key never leaves the
// process; only the certificate is written to disk.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	// CertFile is the PEM file holding Cert.
	CertFile string
}

// KeyPair is a leaf certificate and its key, both as PEM and as files.
type KeyPair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
}

// nextSerial returns a random 127-bit serial number, so certificates never collide without
// any shared counter.
func nextSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux.
	}
	return n.Add(n, big.NewInt(1))
}

// NewCA creates a self-signed CA named name and writes its certificate to dir/<file>.crt.
func NewCA(dir, file, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.CertFile = filepath.Join(dir, file+".crt")
	if err := os.WriteFile(ca.CertFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

// Serving issues a TLS server certificate for localhost and the given IPs, written to
// dir/<file>.crt and dir/<file>.key.
func (ca *CA) Serving(dir, file string, hosts []string, ips []net.IP) (*KeyPair, error) {
	return ca.issue(dir, file, pkix.Name{CommonName: hosts[0]}, hosts, ips, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate for user in the given groups (the API server maps CN
// to the user name and O to groups).
func (ca *CA) Client(dir, file, user string, groups ...string) (*KeyPair, error) {
	return ca.issue(dir, file, pkix.Name{CommonName: user, Organization: groups}, nil, nil, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(dir, file string, subject pkix.Name, hosts []string, ips []net.IP, usage x509.ExtKeyUsage) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               subject,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
		DNSNames:              hosts,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	kp := &KeyPair{
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		CertFile: filepath.Join(dir, file+".crt"),
		KeyFile:  filepath.Join(dir, file+".key"),
	}
	if err := os.WriteFile(kp.CertFile, kp.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(kp.KeyFile, kp.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return kp, nil
}

// writeServiceAccountKey writes an RSA key pair for signing service-account tokens to
// dir/sa.key and dir/sa.pub.
func writeServiceAccountKey(dir string) (keyFile, pubFile string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyFile, pubFile = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, nil
}
