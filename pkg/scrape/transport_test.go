package scrape

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer answers each request on each connection with the next of its
// responses (byte for byte, a closing connection after the last when close
// is set) and counts connections.
type rawServer struct {
	url   string
	conns atomic.Int64
}

func newRawServer(t *testing.T, closeAfter bool, responses ...string) *rawServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &rawServer{url: "http://" + l.Addr().String() + "/metrics"}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for i := 0; ; i++ {
					if _, err := http.ReadRequest(r); err != nil {
						return
					}
					if _, err := io.WriteString(c, responses[i%len(responses)]); err != nil {
						return
					}
					if closeAfter && i == len(responses)-1 {
						return
					}
				}
			}()
		}
	}()
	return s
}

func get(t *testing.T, c *http.Client, url string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func plainClient(t *testing.T) (*http.Client, *plainTransport) {
	t.Helper()
	tr := newPlainTransport(http.DefaultTransport, time.Minute)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, tr
}

// TestPlainTransportBodies reads the body framings an engine may use, over one
// kept connection where the framing allows it, as net/http's Transport does.
func TestPlainTransportBodies(t *testing.T) {
	tests := []struct {
		name      string
		response  string
		want      string
		wantConns int64 // after three requests
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", 1},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello", 1},
		{"informational first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", 1},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", "hello", 3},
		{"HTTP/1.0 until close", "HTTP/1.0 200 OK\r\n\r\nhello", "hello", 3},
		{"empty", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closeAfter := strings.Contains(tt.response, "close") || strings.HasPrefix(tt.response, "HTTP/1.0")
			s := newRawServer(t, closeAfter, tt.response)
			c, _ := plainClient(t)
			for i := range 3 {
				code, body, err := get(t, c, s.url)
				if err != nil || code != http.StatusOK || body != tt.want {
					t.Fatalf("request %d: %d %q %v, want 200 %q", i, code, body, err, tt.want)
				}
			}
			if got := s.conns.Load(); got != tt.wantConns {
				t.Errorf("%d connections for three requests, want %d", got, tt.wantConns)
			}
		})
	}
}

// TestPlainTransportRetriesClosedIdleConnection: an engine that closes a kept
// connection while it is idle costs one new connection, not a failed scrape.
func TestPlainTransportRetriesClosedIdleConnection(t *testing.T) {
	s := newRawServer(t, true, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") // closes after each answer, without saying so
	c, tr := plainClient(t)
	for i := range 3 {
		if code, body, err := get(t, c, s.url); err != nil || code != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q %v", i, code, body, err)
		}
		time.Sleep(20 * time.Millisecond) // let the close arrive
	}
	if got := s.conns.Load(); got != 3 {
		t.Errorf("%d connections, want 3 (each kept one found closed and replaced)", got)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.nIdle > 1 {
		t.Errorf("%d idle connections, want at most 1", tr.nIdle)
	}
}

// TestPlainTransportFailures: what the scraper classifies comes out as
// net/http's Transport gives it: the context's error for a deadline, an error
// for garbage, oversized headers or a body cut short, and no connection kept
// from a failed or unfinished exchange.
func TestPlainTransportFailures(t *testing.T) {
	t.Run("deadline before the headers", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err == nil {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c) // never answers
			}
		}()
		c, _ := plainClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+l.Addr().String()+"/metrics", nil)
		_, err = c.Do(req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("deadline in the body", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte("half"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		c, tr := plainClient(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("body err = %v, want context.DeadlineExceeded", err)
		}
		if tr.nIdle != 0 {
			t.Errorf("%d idle connections after a failed body, want 0", tr.nIdle)
		}
	})
	for _, tt := range []struct{ name, response string }{
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n"},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"},
		{"headers too large", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newRawServer(t, true, tt.response)
			c, tr := plainClient(t)
			if _, _, err := get(t, c, s.url); err == nil {
				t.Errorf("no error from %q", tt.response[:min(40, len(tt.response))])
			}
			if tr.nIdle != 0 {
				t.Errorf("%d idle connections after a failure, want 0", tr.nIdle)
			}
		})
	}
	t.Run("body closed early", func(t *testing.T) {
		s := newRawServer(t, false, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		c, tr := plainClient(t)
		req, _ := http.NewRequest(http.MethodGet, s.url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = resp.Body.Read(make([]byte, 2))
		resp.Body.Close()
		if tr.nIdle != 0 {
			t.Errorf("%d idle connections after an unread body, want 0", tr.nIdle)
		}
	})
}

// TestPlainTransportIdleTimeout: idle connections are closed after the idle
// timeout, and none is kept beyond two per engine.
func TestPlainTransportIdleTimeout(t *testing.T) {
	s := newRawServer(t, false, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	tr := newPlainTransport(http.DefaultTransport, 100*time.Millisecond)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if _, _, err := get(t, c, s.url); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	tr.mu.Lock()
	if tr.nIdle > 2 {
		t.Errorf("%d idle connections to one engine, want at most 2", tr.nIdle)
	}
	tr.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		n, sweeping := tr.nIdle, tr.sweeping
		tr.mu.Unlock()
		if n == 0 && !sweeping {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections (sweeping %v) long after the idle timeout", n, sweeping)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPlainTransportHandsOtherRequestsOn: https and requests with a body go
// to the next round tripper.
func TestPlainTransportHandsOtherRequestsOn(t *testing.T) {
	var handed atomic.Int64
	next := roundTripperFunc(func(*http.Request) (*http.Response, error) {
		handed.Add(1)
		return nil, errors.New("handed on")
	})
	tr := newPlainTransport(next, time.Minute)
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "https://127.0.0.1:1/metrics", nil),
		httptest.NewRequest(http.MethodPost, "http://127.0.0.1:1/metrics", strings.NewReader("x")),
	} {
		req.RequestURI = ""
		if _, err := tr.RoundTrip(req); err == nil || err.Error() != "handed on" {
			t.Errorf("%s %s: %v, want it handed on", req.Method, req.URL, err)
		}
	}
	if handed.Load() != 2 {
		t.Errorf("%d requests handed on, want 2", handed.Load())
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
