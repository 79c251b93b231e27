package scrape

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// MaxErrorDetailBytes bounds Error.Detail: whatever a pod sends (a 4 MB body of
// invalid UTF-8, a 1 MB label value, a status line of any length), the
// message kept per pod and shown to API callers is at most this long.
const MaxErrorDetailBytes = 256

// bodyExcerptBytes bounds the part of Error.Detail quoted from the body (a
// parse error names the offending text).
const bodyExcerptBytes = 160

// Error is why a scrape failed, as it is kept in Result.Err and may be shown
// to API callers (and so in an HPA's conditions): the reason, and a short,
// printable detail (at most MaxErrorDetailBytes) that names what went wrong
// without the pod's address, URL or annotations. The full error, with the URL,
// goes to the log (-v=4) and is not kept.
type Error struct {
	Reason ErrorReason
	Detail string

	cause error // the full error: logged, never stored
}

// Error returns the detail.
func (e *Error) Error() string { return e.Detail }

// Unwrap returns the full error while it is known (before the result is
// stored), else nil.
func (e *Error) Unwrap() error { return e.cause }

// stored is the Error as kept in a Result: without the full error, whose text
// may hold the URL and be large.
func (e *Error) stored() *Error { return &Error{Reason: e.Reason, Detail: e.Detail} }

// newError returns the Error of a failed scrape: detail is what callers may
// see, cause the full error for the log.
func newError(reason ErrorReason, detail string, cause error) *Error {
	return &Error{Reason: reason, Detail: excerpt.String(detail, MaxErrorDetailBytes), cause: cause}
}

// maxStatusBodyBytes bounds what is read of an answer other than 200 OK, to
// tell llama.cpp's "model is not loaded" from other errors.
const maxStatusBodyBytes = 4 << 10

// notLoadedMessage is the error message of llama.cpp's router for a request
// naming a model that is not running when autoload is off
// (router_validate_model in tools/server/server-models.cpp, ggml-org/llama.cpp
// at 00dd0816: HTTP 400, {"error": {"code": 400, "message": "model is not
// loaded", "type": "invalid_request_error"}}).
const notLoadedMessage = "model is not loaded"

// notLoadedError returns the Error of a llama.cpp router answering that the
// model the URL names is not loaded (body: at most maxStatusBodyBytes of the
// answer), nil for any other answer. Only a URL with autoload=false can get
// that answer from the adapter's scrapes (podselect adds it whenever the query
// names a model).
func notLoadedError(resp *http.Response, body []byte, rawURL string) *Error {
	if resp.StatusCode != http.StatusBadRequest {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || !u.Query().Has("model") {
		return nil
	}
	var answer struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &answer) != nil || answer.Error.Message != notLoadedMessage {
		return nil
	}
	model := u.Query().Get("model")
	return newError(ReasonModelNotLoaded,
		fmt.Sprintf("llama.cpp router: model %q is not loaded, so this pod does not serve it (the adapter never loads a model: autoload=false)", excerpt.String(model, 64)),
		fmt.Errorf("GET %s: HTTP 400: %s", rawURL, notLoadedMessage))
}

// statusError is an answer other than 200 OK: its code and the standard text,
// never the pod's reason phrase (a pod can send any text, of any length).
func statusError(resp *http.Response, url string) *Error {
	text := http.StatusText(resp.StatusCode)
	detail := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if text != "" {
		detail += " " + text
	}
	return newError(ReasonHTTPStatus, detail, fmt.Errorf("GET %s: HTTP %s", url, excerpt.String(resp.Status, 128)))
}

// connectDetail names why a connection failed, without its addresses.
func connectDetail(err error) string {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		notTLS      tls.RecordHeaderError
		verifyError *tls.CertificateVerificationError
		dns         *net.DNSError
		netErr      net.Error
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host unreachable"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "connection timed out"
	case errors.As(err, &unknownCA):
		return "TLS: certificate signed by an unknown authority"
	case errors.As(err, &hostname):
		return "TLS: certificate not valid for the name verified"
	case errors.As(err, &invalid):
		return "TLS: certificate invalid (expired, not yet valid or not for serving)"
	case errors.As(err, &verifyError):
		return "TLS: certificate verification failed"
	case errors.As(err, &notTLS), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		// net/http replaces the RecordHeaderError of an HTTP answer by that text.
		return "TLS: the engine did not answer with TLS"
	case errors.As(err, &dns):
		return "DNS lookup failed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the engine"
	}
	return "connection failed"
}

// readDetail names why a body could not be read to its end.
func readDetail(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset while reading the body"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "body ended early"
	}
	return "reading the body failed"
}
