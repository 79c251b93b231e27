package servingcert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// The keys of the Secret. tls.crt and tls.key are those of a kubernetes.io/tls
// Secret (k8s.io/api/core/v1 TLSCertKey, TLSPrivateKeyKey); ca.crt is the name
// cert-manager and service-account Secrets use for a CA bundle.
const (
	// KeyServingCert holds the serving certificate, PEM, leaf only.
	KeyServingCert = corev1.TLSCertKey
	// KeyServingKey holds its private key, PEM.
	KeyServingKey = corev1.TLSPrivateKeyKey
	// KeyCABundle holds the CA certificates the aggregator trusts, PEM, newest
	// first: one CA, or two while a new CA takes over.
	KeyCABundle = "ca.crt"
	// KeyCAKey holds the private key of the newest CA, PEM: the one that signs
	// serving certificates. Older CAs' keys are not kept.
	KeyCAKey = "ca.key"
)

// Backdate is how far before its issue time a certificate's NotBefore is set,
// so that a verifier whose clock is behind still accepts it (the value
// k8s.io/client-go/util/cert/cert.go GenerateSelfSignedCertKeyWithOptions
// uses). The controller reads a certificate's issue time back as
// NotBefore + Backdate, so this must not change between releases.
const Backdate = time.Hour

// renewDivisor: a certificate is renewed when less than 1/renewDivisor of its
// validity remains (a year-long serving certificate about four months before it
// expires, a ten-year CA about 3.3 years before, as kubelet's certificate
// manager renews in the last 30 %–10 % of a certificate's life,
// k8s.io/client-go/util/certificate/certificate_manager.go nextRotationDeadline).
const renewDivisor = 3

// material is the content of the Secret, parsed.
type material struct {
	// cas is the trust bundle, newest first.
	cas []*x509.Certificate
	// signer is the CA that caKey belongs to: the one that signs new serving
	// certificates. It is in cas.
	signer *x509.Certificate
	caKey  crypto.Signer
	// serving is the serving certificate; issuer is the CA in cas that signed it.
	serving    *x509.Certificate
	servingKey crypto.Signer
	issuer     *x509.Certificate

	// data is the Secret data these were read from or will be written as.
	data map[string][]byte
}

// policy is what plan decides by.
type policy struct {
	dnsNames        []string
	servingValidity time.Duration
	caValidity      time.Duration
	// grace is how long a new CA must have been in the bundle before it signs
	// the serving certificate, and how long a new serving certificate must
	// have been in the Secret before the CA that signed its predecessor leaves
	// the bundle: time for every replica to reload the Secret and the
	// aggregator to see the APIService change.
	grace time.Duration
}

// errCorrupt marks Secret content the controller refuses to touch.
var errCorrupt = errors.New("not a serving certificate Secret of saturation-adapter")

// parse reads Secret data. Missing keys, undecodable PEM, keys that do not
// match their certificates and a serving certificate no CA of the bundle
// signed are errors wrapping errCorrupt.
func parse(data map[string][]byte) (*material, error) {
	for _, k := range []string{KeyServingCert, KeyServingKey, KeyCABundle, KeyCAKey} {
		if len(data[k]) == 0 {
			return nil, fmt.Errorf("%w: key %s is missing or empty", errCorrupt, k)
		}
	}
	m := &material{data: data}
	var err error
	if m.cas, err = certutil.ParseCertsPEM(data[KeyCABundle]); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, KeyCABundle, err)
	}
	for _, ca := range m.cas {
		if !ca.IsCA {
			return nil, fmt.Errorf("%w: %s holds %q, which is not a CA certificate", errCorrupt, KeyCABundle, ca.Subject.CommonName)
		}
	}
	if m.caKey, err = parseKey(data[KeyCAKey]); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, KeyCAKey, err)
	}
	for _, ca := range m.cas {
		if samePublicKey(ca.PublicKey, m.caKey.Public()) {
			m.signer = ca
			break
		}
	}
	if m.signer == nil {
		return nil, fmt.Errorf("%w: %s matches no certificate of %s", errCorrupt, KeyCAKey, KeyCABundle)
	}
	leaf, err := certutil.ParseCertsPEM(data[KeyServingCert])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, KeyServingCert, err)
	}
	m.serving = leaf[0]
	if m.servingKey, err = parseKey(data[KeyServingKey]); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errCorrupt, KeyServingKey, err)
	}
	if !samePublicKey(m.serving.PublicKey, m.servingKey.Public()) {
		return nil, fmt.Errorf("%w: %s does not match %s", errCorrupt, KeyServingKey, KeyServingCert)
	}
	for _, ca := range m.cas {
		if m.serving.CheckSignatureFrom(ca) == nil {
			m.issuer = ca
			break
		}
	}
	if m.issuer == nil {
		return nil, fmt.Errorf("%w: no CA of %s signed %s", errCorrupt, KeyCABundle, KeyServingCert)
	}
	return m, nil
}

func parseKey(pemBytes []byte) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(pemBytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return s, nil
}

func samePublicKey(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// encode sets m.data from the parsed fields.
func (m *material) encode() error {
	caKey, err := keyutil.MarshalPrivateKeyToPEM(m.caKey)
	if err != nil {
		return fmt.Errorf("encoding the CA key: %w", err)
	}
	servingKey, err := keyutil.MarshalPrivateKeyToPEM(m.servingKey)
	if err != nil {
		return fmt.Errorf("encoding the serving key: %w", err)
	}
	bundle, err := certutil.EncodeCertificates(m.cas...)
	if err != nil {
		return fmt.Errorf("encoding the CA bundle: %w", err)
	}
	leaf, err := certutil.EncodeCertificates(m.serving)
	if err != nil {
		return fmt.Errorf("encoding the serving certificate: %w", err)
	}
	m.data = map[string][]byte{KeyServingCert: leaf, KeyServingKey: servingKey, KeyCABundle: bundle, KeyCAKey: caKey}
	return nil
}

// newKey returns an ECDSA P-256 key: the kubelet's choice for its serving and
// client certificates (k8s.io/client-go/util/certificate/certificate_manager.go).
// Generating one takes well under a millisecond where RSA-2048 takes tens to
// hundreds on a busy core, and the only client, kube-apiserver's aggregator, is
// Go's crypto/tls, which verifies P-256 natively.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serialNumber() (*big.Int, error) {
	// 128 random bits, positive (RFC 5280 section 4.1.2.2 allows up to 20 octets).
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// newCA returns a self-signed CA valid from now-Backdate to now+validity,
// allowed to sign end-entity certificates only (path length 0).
func newCA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("generating a CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, fmt.Errorf("generating a serial number: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("saturation-adapter-ca@%d", now.Unix())},
		NotBefore:             now.Add(-Backdate).UTC(),
		NotAfter:              now.Add(validity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the new CA certificate: %w", err)
	}
	return cert, key, nil
}

// newServing returns a serving certificate for dnsNames signed by ca, valid
// from now-Backdate to now+validity but never past the CA's own NotAfter.
func newServing(now time.Time, validity time.Duration, dnsNames []string, ca *x509.Certificate, caKey crypto.Signer) (*x509.Certificate, crypto.Signer, error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("generating a serving key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, fmt.Errorf("generating a serial number: %w", err)
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-Backdate).UTC(),
		NotAfter:     notAfter.UTC(),
		// ECDSA keys sign; they do not encipher (RFC 5480 section 3).
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the new serving certificate: %w", err)
	}
	return cert, key, nil
}

// fresh returns new material: a new CA and a serving certificate it signed.
func fresh(now time.Time, p policy) (*material, error) {
	ca, caKey, err := newCA(now, p.caValidity)
	if err != nil {
		return nil, err
	}
	serving, servingKey, err := newServing(now, p.servingValidity, p.dnsNames, ca, caKey)
	if err != nil {
		return nil, err
	}
	m := &material{cas: []*x509.Certificate{ca}, signer: ca, caKey: caKey, serving: serving, servingKey: servingKey, issuer: ca}
	return m, m.encode()
}

// issuedAt is when a certificate made by this package was issued.
func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(Backdate) }

// plan returns the material to write at now, or nil when m needs no change,
// with the reasons for each change. published says whether every APIService
// that routes to the adapter carries m's CA bundle.
//
// The steps, in order:
//
//  1. The signing CA is replaced when less than a third of caValidity remains
//     (or it expired). The new CA goes first in the bundle; the old one stays,
//     since the serving certificate in use is still the one it signed.
//  2. The serving certificate is renewed when it is invalid now, lacks one of
//     the DNS names (at once: it fails verification anyway), or when less
//     than a third of servingValidity remains or a newer CA exists (a shorter
//     servingValidity therefore applies from the next renewal on, and
//     replicas briefly running different validities do not undo each other's
//     work). Such a planned renewal by a
//     CA younger than grace, or not yet published, waits: the aggregator must
//     trust the new CA before any replica serves a certificate it signed.
//  3. CAs leave the bundle when they expired, or when the serving certificate
//     was signed by the current CA at least grace ago (every replica has
//     reloaded it), so nothing in use needs them.
func plan(m *material, now time.Time, p policy, published bool) (*material, []string, error) {
	next := *m
	next.cas = slices.Clone(m.cas)
	var reasons []string

	if left := m.signer.NotAfter.Sub(now); left < p.caValidity/renewDivisor {
		ca, key, err := newCA(now, p.caValidity)
		if err != nil {
			return nil, nil, err
		}
		reasons = append(reasons, fmt.Sprintf("CA %q expires in %s (renewed with less than 1/%d of %s left)",
			m.signer.Subject.CommonName, left.Round(time.Second), renewDivisor, p.caValidity))
		next.cas = append([]*x509.Certificate{ca}, next.cas...)
		next.signer, next.caKey = ca, key
		published = false
	}

	s := m.serving
	names := p.dnsNames
	var urgent, due string
	switch left := s.NotAfter.Sub(now); {
	case now.Before(s.NotBefore) || left <= 0:
		urgent = fmt.Sprintf("it is not valid now (valid %s to %s)", s.NotBefore.Format(time.RFC3339), s.NotAfter.Format(time.RFC3339))
	case !containsAll(s.DNSNames, p.dnsNames):
		urgent = fmt.Sprintf("its DNS names %v lack some of %v", s.DNSNames, p.dnsNames)
		// Keep the names it had: a replica still running with the old Service
		// name then finds its names too and does not renew back, which would
		// start a ping-pong through the two replicas' watches. The next planned
		// renewal drops them.
		names = union(p.dnsNames, s.DNSNames)
	case next.issuer != next.signer:
		due = fmt.Sprintf("CA %q is newer than its issuer %q", next.signer.Subject.CommonName, next.issuer.Subject.CommonName)
	case left < p.servingValidity/renewDivisor:
		due = fmt.Sprintf("it expires in %s (renewed with less than 1/%d of %s left)", left.Round(time.Second), renewDivisor, p.servingValidity)
	}
	if due != "" && (now.Sub(issuedAt(next.signer)) < p.grace || !published) {
		klog.V(2).InfoS("Serving certificate renewal waits until the CA has reached every verifier",
			"reason", due, "ca", next.signer.Subject.CommonName, "caAge", now.Sub(issuedAt(next.signer)), "grace", p.grace, "published", published)
		due = ""
	}
	if why := urgent + due; why != "" {
		cert, key, err := newServing(now, p.servingValidity, names, next.signer, next.caKey)
		if err != nil {
			return nil, nil, err
		}
		reasons = append(reasons, fmt.Sprintf("serving certificate renewed: %s", why))
		next.serving, next.servingKey, next.issuer = cert, key, next.signer
	}

	kept := next.cas[:0:0]
	for _, ca := range next.cas {
		switch {
		case ca == next.signer || ca == next.issuer && next.issuer != next.signer:
			kept = append(kept, ca)
		case !now.Before(ca.NotAfter):
			reasons = append(reasons, fmt.Sprintf("expired CA %q left the bundle", ca.Subject.CommonName))
		case next.issuer == next.signer && now.Sub(issuedAt(next.serving)) >= p.grace:
			reasons = append(reasons, fmt.Sprintf("CA %q left the bundle: the serving certificate in use is signed by %q",
				ca.Subject.CommonName, next.signer.Subject.CommonName))
		default:
			kept = append(kept, ca)
		}
	}
	next.cas = kept

	if len(reasons) == 0 {
		return nil, nil, nil
	}
	if err := next.encode(); err != nil {
		return nil, nil, err
	}
	return &next, reasons, nil
}

// containsAll reports whether have holds every name of want.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// union returns a followed by the names of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, n := range b {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
