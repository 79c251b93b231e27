package prometheus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"
	"golang.org/x/net/http/httpguts"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
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
	// Answers are decoded as they stream in, so what is held is the series
	// kept, not the body.
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
	if err := CheckURL(o.URL); err != nil {
		return err
	}
	for name, value := range o.Headers {
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			return fmt.Errorf("the header name %q is not a valid HTTP header name", name)
		case value == "":
			return fmt.Errorf("the header %s has an empty value", name)
		case !httpguts.ValidHeaderFieldValue(value):
			return fmt.Errorf("the value of header %s holds a control character (a newline, NUL)", name)
		}
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

// CheckURL returns an error naming what is wrong with a Prometheus base URL:
// not http or https, no host name (http://:9090 would reach the adapter's own
// pod), a port outside 1–65535, a query or fragment (the query's own
// parameters replace them), or a path into the API itself (the client appends
// /api/v1/query: give the base, e.g. http://mimir/prometheus).
func CheckURL(raw string) error {
	const example = "such as http://prometheus-operated.monitoring:9090"
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("the Prometheus URL %q must be an http or https URL %s", Redact(raw), example)
	case u.Hostname() == "":
		return fmt.Errorf("the Prometheus URL %q names no host: give the Service's, %s", Redact(raw), example)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return fmt.Errorf("the Prometheus URL %q has a query or fragment: give the base URL alone, %s", Redact(raw), example)
	case strings.Contains(u.Path+"/", "/api/v1/"):
		return fmt.Errorf("the Prometheus URL %q reaches into the API: give its base, without /api/v1 (the adapter adds /api/v1/query), %s", Redact(raw), example)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("the Prometheus URL %q has port %s: want 1–65535", Redact(raw), p)
		}
	}
	return nil
}

// Client queries the Prometheus HTTP API: instant queries whose answers are
// decoded as they stream in (decodeStream), never held whole, and bounded by
// ClientOptions.MaxResponseBytes. It is safe for concurrent use.
type Client struct {
	base *url.URL
	rt   http.RoundTripper
	max  int64
}

// NewClient returns a client of the Prometheus HTTP API over common/config's
// HTTP client (the one Prometheus itself uses for remote read and scrapes).
// Errors name the invalid setting.
func NewClient(o ClientOptions) (*Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rt, err := promconfig.NewRoundTripperFromConfig(o.HTTPClientConfig(), "saturation_adapter_prometheus",
		promconfig.WithIdleConnTimeout(90*time.Second), promconfig.WithUserAgent("saturation-adapter"))
	if err != nil {
		return nil, fmt.Errorf("settings of the Prometheus client: %w", err)
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("the Prometheus URL %q: %w", Redact(o.URL), err)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return &Client{base: u, rt: rt, max: o.MaxResponseBytes}, nil
}

// errTooLarge: an answer above ClientOptions.MaxResponseBytes.
var errTooLarge = errors.New("response body too large")

// QueryError is Prometheus's own error answer to a query (bad_data,
// execution, timeout, ...), its message cut to a few hundred bytes.
type QueryError struct {
	Type string
	Msg  string
}

func (e *QueryError) Error() string { return e.Type + ": " + e.Msg }

// StatusError is an HTTP status other than 2xx without a Prometheus error
// answer (a proxy's 500, an auth gateway's 401).
type StatusError struct{ Code int }

func (e *StatusError) Error() string {
	if e.Code >= 500 {
		return fmt.Sprintf("server error: %d", e.Code)
	}
	return fmt.Sprintf("client error: %d", e.Code)
}

// maxErrorBodyBytes bounds the body read of an answer with an error status.
const maxErrorBodyBytes = 64 << 10

// query runs an instant query at ts (Prometheus's own query timeout set to
// timeout) and decodes its answer as it streams, keeping the series keep
// accepts (see decodeStream). It POSTs the form, as client_golang does, and
// falls back to GET where a proxy refuses POST (403, 405, 501). Errors:
// *QueryError, *StatusError, errTooLarge and ErrResponse (wrapped), the
// context's and the transport's.
func (c *Client) query(ctx context.Context, expr string, ts time.Time, timeout time.Duration, lim decodeLimits, keep func(seriesLabels) bool) (queryAnswer, error) {
	form := url.Values{"query": {expr}}
	if !ts.IsZero() {
		form.Set("time", strconv.FormatFloat(float64(ts.UnixMilli())/1e3, 'f', -1, 64))
	}
	if timeout > 0 {
		form.Set("timeout", strconv.FormatInt(timeout.Milliseconds(), 10)+"ms")
	}
	u := *c.base
	u.Path += "/api/v1/query"
	body := form.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(body))
	if err != nil {
		return queryAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.rt.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) {
		drain(resp)
		u.RawQuery = body
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil); err != nil {
			return queryAnswer{}, err
		}
		resp, err = c.rt.RoundTrip(req) //nolint:bodyclose // closed by the deferred drain below
	}
	if err != nil {
		return queryAnswer{}, err
	}
	defer drain(resp)
	if resp.ContentLength > c.max {
		return queryAnswer{}, fmt.Errorf("%w: %d bytes, more than %d (--prometheus-max-response-bytes)", errTooLarge, resp.ContentLength, c.max)
	}
	r := &limitedReader{rc: resp.Body, left: c.max}
	if resp.StatusCode/100 != 2 {
		return queryAnswer{}, errorAnswer(resp.StatusCode, io.LimitReader(r, maxErrorBodyBytes))
	}
	a, err := decodeStream(r, lim, keep)
	if err != nil && errors.Is(r.err, errTooLarge) {
		return queryAnswer{}, r.err
	}
	return a, err
}

// errorAnswer is the error of an answer with a non-2xx status: Prometheus's
// error answer when the body is one, else the status.
func errorAnswer(code int, body io.Reader) error {
	var env struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
	}
	if b, err := io.ReadAll(body); err == nil && json.Unmarshal(b, &env) == nil && env.Status == "error" && env.ErrorType != "" {
		return &QueryError{Type: excerpt.String(env.ErrorType, 40), Msg: excerpt.String(env.Error, 300)}
	}
	return &StatusError{Code: code}
}

// drain reads a little of what is left of a body, so that the connection
// can be reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}

// limitedReader fails with errTooLarge past left bytes; err keeps that error
// for the caller (a decoder may report it as its own).
type limitedReader struct {
	rc   io.ReadCloser
	left int64
	err  error
}

func (r *limitedReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		// One more byte tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := r.rc.Read(one[:]); n > 0 {
			r.err = fmt.Errorf("%w: more than the limit (--prometheus-max-response-bytes)", errTooLarge)
			return 0, r.err
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
