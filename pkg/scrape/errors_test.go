package scrape_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

// rawEngine answers every connection with response, byte for byte (a status
// line Go's server would never send).
func rawEngine(t *testing.T, response string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = c.Write([]byte(response))
			}()
		}
	}()
	return "http://" + l.Addr().String() + "/metrics"
}

// llamaNotLoaded is llama.cpp's router's answer to a request naming a model
// that is not running when autoload is off (router_validate_model,
// tools/server/server-models.cpp at ggml-org/llama.cpp 00dd0816).
const llamaNotLoaded = `{"error":{"code":400,"message":"model is not loaded","type":"invalid_request_error"}}`

// TestScrapeErrorsAreBounded feeds hostile engines to the scraper: what is
// kept per pod and shown to callers is a short printable detail naming the
// reason, never the pod's address and never more than MaxErrorDetailBytes,
// whatever the pod sent (issue 12, faults 3 and 6).
func TestScrapeErrorsAreBounded(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	tests := []struct {
		name       string
		url        func(t *testing.T) string
		wantReason scrape.ErrorReason
		wantDetail string
	}{
		{
			name: "4 MB of invalid UTF-8",
			url: func(t *testing.T) string {
				return newEngine(t, serve(http.StatusOK, []byte(strings.Repeat("\xff\xfe\x00", 4<<20/3)))).srv.URL + "/metrics"
			},
			wantReason: scrape.ReasonParse, wantDetail: "parsing exposition",
		},
		{
			name: "1 MB label value in a malformed series",
			url: func(t *testing.T) string {
				return newEngine(t, serve(http.StatusOK, []byte(`vllm:num_requests_waiting{engine="`+huge+`" 3`+"\n"))).srv.URL + "/metrics"
			},
			wantReason: scrape.ReasonParse, wantDetail: "parsing exposition",
		},
		{
			name: "1 MB reason phrase",
			url: func(t *testing.T) string {
				return rawEngine(t, "HTTP/1.1 503 "+huge+"\r\nContent-Length: 0\r\n\r\n")
			},
			wantReason: scrape.ReasonHTTPStatus, wantDetail: "HTTP 503 Service Unavailable",
		},
		{
			// llama.cpp's router with autoload=false (the adapter's scrapes never
			// load a model): the pod does not serve the model, which is said as
			// such and not as an HTTP fault.
			name: "llama.cpp router: model not loaded",
			url: func(t *testing.T) string {
				return newEngine(t, serve(http.StatusBadRequest, []byte(llamaNotLoaded))).srv.URL + "/metrics?model=qwen3-8b&autoload=false"
			},
			wantReason: scrape.ReasonModelNotLoaded, wantDetail: `llama.cpp router: model "qwen3-8b" is not loaded, so this pod does not serve it`,
		},
		{
			name: "the same answer to a URL naming no model",
			url: func(t *testing.T) string {
				return newEngine(t, serve(http.StatusBadRequest, []byte(llamaNotLoaded))).srv.URL + "/metrics"
			},
			wantReason: scrape.ReasonHTTPStatus, wantDetail: "HTTP 400 Bad Request",
		},
		{
			name: "another 400 from a router",
			url: func(t *testing.T) string {
				body := strings.Replace(llamaNotLoaded, "model is not loaded", "model 'qwen3-8b' not found", 1)
				return newEngine(t, serve(http.StatusBadRequest, []byte(body))).srv.URL + "/metrics?model=qwen3-8b&autoload=false"
			},
			wantReason: scrape.ReasonHTTPStatus, wantDetail: "HTTP 400 Bad Request",
		},
		{
			name: "the message with another status",
			url: func(t *testing.T) string {
				return newEngine(t, serve(http.StatusServiceUnavailable, []byte(llamaNotLoaded))).srv.URL + "/metrics?model=qwen3-8b&autoload=false"
			},
			wantReason: scrape.ReasonHTTPStatus, wantDetail: "HTTP 503 Service Unavailable",
		},
		{
			name: "connection refused",
			url: func(t *testing.T) string {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				l.Close()
				return "http://" + l.Addr().String() + "/metrics?token=secret"
			},
			wantReason: scrape.ReasonConnect, wantDetail: "connection refused",
		},
		{
			name: "certificate of an unknown authority",
			url: func(t *testing.T) string {
				srv := httptest.NewTLSServer(serve(http.StatusOK, nil))
				t.Cleanup(srv.Close)
				return srv.URL + "/metrics"
			},
			wantReason: scrape.ReasonConnect, wantDetail: "TLS: certificate signed by an unknown authority",
		},
		{
			name: "plain HTTP on an https URL",
			url: func(t *testing.T) string {
				return strings.Replace(newEngine(t, serve(http.StatusOK, nil)).srv.URL, "http:", "https:", 1) + "/metrics"
			},
			wantReason: scrape.ReasonConnect, wantDetail: "TLS: the engine did not answer with TLS",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := defaultOptions()
			f := newFixture(t, opts)
			target := scrape.Target{Pod: types.NamespacedName{Namespace: "llm", Name: "hostile"}, UID: "hostile", URL: tt.url(t)}
			r := f.scraper.ScrapeOne(context.Background(), target)
			var se *scrape.Error
			if !errors.As(r.Err, &se) {
				t.Fatalf("Err = %#v, want a *scrape.Error", r.Err)
			}
			msg := se.Error()
			if se.Reason != tt.wantReason || !strings.HasPrefix(msg, tt.wantDetail) {
				t.Errorf("Err = %s %q, want reason %s and a detail starting %q", se.Reason, msg, tt.wantReason, tt.wantDetail)
			}
			if len(msg) > scrape.MaxErrorDetailBytes || !utf8.ValidString(msg) || strings.IndexFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
				t.Errorf("detail of %d bytes (valid UTF-8 %v): %q; want printable and at most %d", len(msg), utf8.ValidString(msg), excerptForLog(msg), scrape.MaxErrorDetailBytes)
			}
			for _, leak := range []string{"127.0.0.1", "/metrics", "token=secret"} {
				if strings.Contains(msg, leak) {
					t.Errorf("detail %q shows %q", msg, leak)
				}
			}
			if se.Unwrap() != nil {
				t.Error("the stored error keeps the full error")
			}
		})
	}
}

func excerptForLog(s string) string {
	if len(s) > 300 {
		return fmt.Sprintf("%s… (%d bytes)", s[:300], len(s))
	}
	return s
}
