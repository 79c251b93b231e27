package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// caSource names where the images' CA certificates come from: Mozilla's NSS trust store
// as the Go project packages it, at the version hack/release/go.mod pins (bumped like any
// other dependency, in a commit, so the images change only on purpose).
const caSource = "golang.org/x/crypto/x509roots/fallback/bundle as pinned by hack/release/go.mod"

// caBundle returns the roots of the pinned NSS bundle as PEM, in the bundle's order.
// Roots that NSS distrusts after a date keep no such constraint in a PEM file (as in
// Debian's ca-certificates.crt): they are included, as the Go fallback roots would
// include them for certificates issued before that date.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if _, err := x509.ParseCertificate(root.Certificate); err != nil {
			return nil, fmt.Errorf("CA bundle: root %d: %w", n, err)
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA bundle: %s holds no roots", caSource)
	}
	return buf.Bytes(), nil
}
