package prometheus

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	promconfig "github.com/prometheus/common/config"
)

// ClientOptions say how the adapter reaches Prometheus (or Thanos Query,
// Mimir, VictoriaMetrics: any server of the Prometheus HTTP API).
type ClientOptions struct {
	// URL is the API's base URL, e.g. http://prometheus-operated.monitoring:9090
	// (Mimir: …/prometheus).
	URL string
	// BearerTokenFile, when set, is sent as "Authorization: Bearer <token>",
	// re-read on every request (a projected ServiceAccount token rotates).
	BearerTokenFile string
	// TLS verifies an https server and, with CertFile and KeyFile, presents a
	// client certificate; files are re-read when they change.
	TLS promconfig.TLSConfig
	// Headers are sent with every query (Mimir's X-Scope-OrgID).
	Headers map[string]string
	// MaxResponseBytes bounds one answer's body; a larger one is an error.
	MaxResponseBytes int64
}

// HTTPClientConfig returns the options as a Prometheus HTTP client
// configuration (github.com/prometheus/common/config), the one Prometheus
// itself uses for remote read and scrapes, so every setting means what it
// means there.
func (o ClientOptions) HTTPClientConfig() promconfig.HTTPClientConfig {
	cfg := promconfig.HTTPClientConfig{TLSConfig: o.TLS, FollowRedirects: true, EnableHTTP2: true}
	if o.BearerTokenFile != "" {
		cfg.Authorization = &promconfig.Authorization{Type: "Bearer", CredentialsFile: o.BearerTokenFile}
	}
	if len(o.Headers) > 0 {
		h := &promconfig.Headers{Headers: map[string]promconfig.Header{}}
		for k, v := range o.Headers {
			h.Headers[k] = promconfig.Header{Values: []string{v}}
		}
		cfg.HTTPHeaders = h
	}
	return cfg
}

// Validate returns an error naming what is wrong: a URL that is not http(s),
// a reserved header, a key without its certificate.
func (o ClientOptions) Validate() error {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("the Prometheus URL %q must be an http or https URL such as http://prometheus-operated.monitoring:9090", Redact(o.URL))
	}
	if o.MaxResponseBytes < 1 {
		return fmt.Errorf("the largest response must be at least 1 byte, got %d", o.MaxResponseBytes)
	}
	if (o.TLS.CertFile == "") != (o.TLS.KeyFile == "") {
		return fmt.Errorf("a client certificate needs both its certificate file and its key file (got certificate %q, key %q)", o.TLS.CertFile, o.TLS.KeyFile)
	}
	cfg := o.HTTPClientConfig()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("settings of the Prometheus client: %w", err)
	}
	return nil
}

// NewAPI returns the Prometheus HTTP API client (client_golang's api/prometheus/v1
// over common/config's HTTP client). Errors name the invalid setting.
func NewAPI(o ClientOptions) (v1.API, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rt, err := promconfig.NewRoundTripperFromConfig(o.HTTPClientConfig(), "saturation_adapter_prometheus",
		promconfig.WithIdleConnTimeout(90*time.Second), promconfig.WithUserAgent("saturation-adapter"))
	if err != nil {
		return nil, fmt.Errorf("settings of the Prometheus client: %w", err)
	}
	c, err := api.NewClient(api.Config{Address: o.URL, RoundTripper: limitBody{rt: rt, max: o.MaxResponseBytes}})
	if err != nil {
		return nil, fmt.Errorf("the Prometheus URL %q: %w", Redact(o.URL), err)
	}
	return v1.NewAPI(c), nil
}

// errTooLarge: an answer above ClientOptions.MaxResponseBytes.
var errTooLarge = errors.New("response body too large")

// limitBody fails a response whose body exceeds max bytes (client_golang reads
// the whole body into memory).
type limitBody struct {
	rt  http.RoundTripper
	max int64
}

func (l limitBody) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > l.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %d bytes, more than %d (--prometheus-max-response-bytes)", errTooLarge, resp.ContentLength, l.max)
	}
	resp.Body = &limitedReader{rc: resp.Body, left: l.max}
	return resp, nil
}

type limitedReader struct {
	rc   io.ReadCloser
	left int64
}

func (r *limitedReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		// One more byte tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := r.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w: more than the limit (--prometheus-max-response-bytes)", errTooLarge)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	return n, err
}

func (r *limitedReader) Close() error { return r.rc.Close() }

// userinfo matches the credentials of a URL, for one that does not parse.
var userinfo = regexp.MustCompile(`//[^/@]*@`)

// Redact hides the password of a URL, even of one that does not parse, for
// messages and logs.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return userinfo.ReplaceAllString(s, "//xxxxx@")
	}
	return u.Redacted()
}
