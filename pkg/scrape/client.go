package scrape

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	promconfig "github.com/prometheus/common/config"
)

// Buffer sizes of each kept-alive connection to an engine. net/http's 4 KiB
// each cost 80 MB at 10,000 engines; a scrape's request is one short line and
// a few headers, and a response's headers are read through the read buffer
// while its body (47 KB for vLLM) is read past it, straight into the scrape's
// pooled buffer (bufio.Reader.Read skips its buffer for reads larger than it).
const (
	connReadBufferBytes  = 1 << 10
	connWriteBufferBytes = 512
)

// errTLSRefs: the scrape TLS settings name secrets by reference, which only a
// Prometheus server's secret manager resolves.
var errTLSRefs = errors.New("secret references (ca_ref, cert_ref, key_ref) are not supported")

// newRoundTripper returns the transport of NewHTTPClient: plain-HTTP scrapes
// go through plainTransport, everything else through a net/http Transport
// with the settings github.com/prometheus/common/config gives a scrape config
// (its TLS configuration, re-read when a CA, certificate or key file changes:
// the round tripper compares their hashes on each request), without that
// package's dial tracing (go-conntrack keeps a golang.org/x/net/trace event
// log of 6 KiB per open connection, 60 MB at 10,000 engines) and with smaller
// connection buffers. HTTP/1.1 only, no proxy, no compression: the adapter
// reads bodies as they come.
func newRoundTripper(c promconfig.TLSConfig) (http.RoundTripper, error) {
	rt, err := newTLSRoundTripper(c)
	if err != nil {
		return nil, err
	}
	return newPlainTransport(rt, idleConnTimeout), nil
}

// idleConnTimeout closes a connection to an engine unused for this long.
const idleConnTimeout = 90 * time.Second

// newTLSRoundTripper returns the net/http transport of newRoundTripper.
func newTLSRoundTripper(c promconfig.TLSConfig) (http.RoundTripper, error) {
	if c.CARef != "" || c.CertRef != "" || c.KeyRef != "" {
		return nil, errTLSRefs
	}
	tlsConfig, err := promconfig.NewTLSConfig(&c)
	if err != nil {
		return nil, err
	}
	settings := promconfig.TLSRoundTripperSettings{
		CA: secret(string(c.CA), c.CAFile), Cert: secret(c.Cert, c.CertFile), Key: secret(string(c.Key), c.KeyFile),
	}
	if c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" {
		// Nothing to re-read.
		return newTransport(tlsConfig), nil
	}
	return promconfig.NewTLSRoundTripper(tlsConfig, settings, func(cfg *tls.Config) (http.RoundTripper, error) {
		return newTransport(cfg), nil
	})
}

// secret returns the inline or file secret of a TLS setting, nil for neither.
func secret(inline, file string) promconfig.SecretReader {
	switch {
	case file != "":
		return promconfig.NewFileSecret(file)
	case inline != "":
		return promconfig.NewInlineSecret(inline)
	}
	return nil
}

// newTransport returns an HTTP/1.1 transport with the connection limits and
// timeouts github.com/prometheus/common/config gives a scrape (up to 1,000 idle
// connections per host and 20,000 in all; the scrape's own deadline is the
// only one on a request) and an idle timeout of 90 s.
func newTransport(tlsConfig *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{}).DialContext,
		TLSClientConfig:       tlsConfig,
		MaxIdleConns:          20000,
		MaxIdleConnsPerHost:   1000,
		IdleConnTimeout:       idleConnTimeout,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ReadBufferSize:        connReadBufferBytes,
		WriteBufferSize:       connWriteBufferBytes,
	}
}
