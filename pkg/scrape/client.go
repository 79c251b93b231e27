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

// newRoundTripper returns the transport of NewHTTPClient: a net/http
// Transport with the settings github.com/prometheus/common/config gives a
// scrape config (its TLS configuration, re-read when a CA, certificate or key
// file changes: the round tripper compares their hashes on each request),
// without that package's dial tracing (go-conntrack keeps a
// golang.org/x/net/trace event log of 6 KiB per open connection, 60 MB at
// 10,000 engines) and with smaller connection buffers. HTTP/1.1 only, no
// proxy, no compression: the adapter reads bodies as they come.
//
// Plain-HTTP scrapes went through a hand-written transport (one goroutine per
// exchange instead of net/http's two per connection) until issue 19 held it
// to a gain of 1.5x at 3,000 engines: BenchmarkScrape3000Engines measured
// 1.15x less CPU per scrape round (1.39x for the transport alone), so the
// library reads every scrape. Its cost: about 10 KiB more per open
// connection (net/http's goroutine stacks), some 30 MiB at 3,000 engines.
func newRoundTripper(c promconfig.TLSConfig) (http.RoundTripper, error) {
	return newTLSRoundTripper(c, idleConnTimeout)
}

// idleConnTimeout closes a connection to an engine unused for this long.
const idleConnTimeout = 90 * time.Second

// newTLSRoundTripper returns the net/http transport of newRoundTripper, its
// idle connections closed after idle.
func newTLSRoundTripper(c promconfig.TLSConfig, idle time.Duration) (http.RoundTripper, error) {
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
		return newTransport(tlsConfig, idle), nil
	}
	return promconfig.NewTLSRoundTripper(tlsConfig, settings, func(cfg *tls.Config) (http.RoundTripper, error) {
		return newTransport(cfg, idle), nil
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

// newTransport returns an HTTP/1.1 transport with the timeouts
// github.com/prometheus/common/config gives a scrape (the scrape's own
// deadline is the only one on a request), at most two idle connections per
// engine (a scheduled and an on-demand scrape may overlap; the scraper never
// runs more at once) and 20,000 in all, closed after idle.
func newTransport(tlsConfig *tls.Config, idle time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{}).DialContext,
		TLSClientConfig:       tlsConfig,
		MaxIdleConns:          20000,
		MaxIdleConnsPerHost:   maxIdleConnsPerEngine,
		IdleConnTimeout:       idle,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ReadBufferSize:        connReadBufferBytes,
		WriteBufferSize:       connWriteBufferBytes,
	}
}

// maxIdleConnsPerEngine bounds the idle connections kept to one engine.
const maxIdleConnsPerEngine = 2
