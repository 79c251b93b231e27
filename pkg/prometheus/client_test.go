package prometheus

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
)

// The client sends the token file's current content and the extra headers
// with every query, verifies an https server with the CA file, and refuses an
// answer above the size bound.
func TestClient(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(emptyVector))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := ClientOptions{URL: srv.URL, BearerTokenFile: token, TLS: promconfig.TLSConfig{CAFile: ca},
		Headers: map[string]string{"X-Scope-OrgID": "tenant-1"}, MaxResponseBytes: DefaultMaxResponseBytes}
	api, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	query := func() error {
		_, err := api.query(context.Background(), "up", time.Now(), 0, decodeLimits{}, nil)
		return err
	}
	if err := query(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if got.Get("Authorization") != "Bearer first" || got.Get("X-Scope-OrgID") != "tenant-1" || got.Get("User-Agent") != "saturation-adapter" {
		t.Errorf("headers %v, want the bearer token, the tenant and the user agent", got)
	}
	mu.Unlock()
	// A rotated token is read on the next query.
	if err := os.WriteFile(token, []byte("second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := query(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if got.Get("Authorization") != "Bearer second" {
		t.Errorf("Authorization %q after rotation, want the new token", got.Get("Authorization"))
	}
	mu.Unlock()

	o.MaxResponseBytes = 10
	small, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.query(context.Background(), "up", time.Now(), 0, decodeLimits{}, nil); !errors.Is(err, errTooLarge) || reasonOf(err) != ReasonResponse {
		t.Errorf("err = %v, want errTooLarge (reason response)", err)
	}

	o.TLS = promconfig.TLSConfig{}
	untrusted, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusted.query(context.Background(), "up", time.Now(), 0, decodeLimits{}, nil); err == nil || reasonOf(err) != ReasonConnect {
		t.Errorf("err = %v, want a TLS verification failure (reason connect)", err)
	}
}

func TestClientOptionsValidate(t *testing.T) {
	tests := []struct {
		o    ClientOptions
		want string
	}{
		{ClientOptions{URL: "prometheus:9090", MaxResponseBytes: 1}, "must be an http or https URL"},
		{ClientOptions{URL: "http://user:secret@prom:9090 x", MaxResponseBytes: 1}, "must be an http or https URL"},
		{ClientOptions{URL: "http://prom:9090", MaxResponseBytes: 1, Headers: map[string]string{"Authorization": "x"}}, `header "Authorization" is not allowed`},
		{ClientOptions{URL: "http://prom:9090", MaxResponseBytes: 1, TLS: promconfig.TLSConfig{CertFile: "c.pem"}}, "needs both its certificate file and its key file"},
		{ClientOptions{URL: "http://prom:9090"}, "at least 1 byte"},
		// Each once started, turned Ready and failed every query.
		{ClientOptions{URL: "http://:9090", MaxResponseBytes: 1}, "names no host"},
		{ClientOptions{URL: "http://prom:0", MaxResponseBytes: 1}, "has port 0: want 1–65535"},
		{ClientOptions{URL: "http://prom:70000", MaxResponseBytes: 1}, "has port 70000"},
		{ClientOptions{URL: "http://prom:9090/api/v1/query", MaxResponseBytes: 1}, "reaches into the API"},
		{ClientOptions{URL: "http://mimir/prometheus/api/v1", MaxResponseBytes: 1}, "reaches into the API"},
		{ClientOptions{URL: "http://prom:9090?x=1", MaxResponseBytes: 1}, "has a query or fragment"},
		{ClientOptions{URL: "http://prom:9090/#f", MaxResponseBytes: 1}, "has a query or fragment"},
		{ClientOptions{URL: "http://user:secret@prom:9090?", MaxResponseBytes: 1}, "has a query or fragment"},
		{ClientOptions{URL: "http://prom:9090", MaxResponseBytes: 1, Headers: map[string]string{"X Scope OrgID": "t1"}}, `header name "X Scope OrgID" is not a valid`},
		{ClientOptions{URL: "http://prom:9090", MaxResponseBytes: 1, Headers: map[string]string{"X-Scope-OrgID": "t1\nX-Evil: 1"}}, "holds a control character"},
		{ClientOptions{URL: "http://prom:9090", MaxResponseBytes: 1, Headers: map[string]string{"X-Scope-OrgID": "t\x001"}}, "holds a control character"},
		{ClientOptions{URL: "http://prom:9090", MaxResponseBytes: 1, Headers: map[string]string{"X-Scope-OrgID": ""}}, "has an empty value"},
	}
	for _, tt := range tests {
		err := tt.o.Validate()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.want)) {
			t.Errorf("Validate(%+v) = %v, want it to say %q", tt.o, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Validate(%+v) = %v: a password in the URL is shown", tt.o, err)
		}
	}
	for _, u := range []string{"https://mimir.example/prometheus", "http://prometheus-operated.monitoring:9090", "http://thanos-query:10902/",
		"http://user:pass@[::1]:9090", "https://mimir.example/prometheus/api/v1beta"} {
		if err := (ClientOptions{URL: u, MaxResponseBytes: 1, Headers: map[string]string{"X-Scope-OrgID": "tenant-1"}}).Validate(); err != nil {
			t.Errorf("a valid URL %s: %v", u, err)
		}
	}
}
