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

	promconfig "github.com/prometheus/common/config"
)

// The scrape transport is net/http's (see newRoundTripper). These tests hold
// it to what the scraper relies on; they were written for the hand-written
// transport it had until issue 19 and keep their assertions, observed from
// the engine's side (connections opened, and still open).

// rawServer answers each request on each connection with the next of its
// responses (byte for byte, a closing connection after the last when close
// is set), counts connections and those still open.
type rawServer struct {
	url   string
	conns atomic.Int64
	open  atomic.Int64
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
			s.open.Add(1)
			go func() {
				defer s.open.Add(-1)
				defer c.Close()
				r := bufio.NewReader(c)
				for i := 0; ; i++ {
					if _, err := http.ReadRequest(r); err != nil {
						return // the client closed the connection
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

// waitOpen waits until at most want of the server's connections are open
// (the client closed the others), failing after 10 s.
func waitOpen(t *testing.T, open func() int64, want int64, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for open() > want {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open %s, want at most %d", open(), what, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// scrapeClient returns a client with the scrape transport, its idle
// connections closed after idle.
func scrapeClient(t *testing.T, idle time.Duration) *http.Client {
	t.Helper()
	rt, err := newTLSRoundTripper(promconfig.TLSConfig{}, idle)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestTransportBodies reads the body framings an engine may use, over one
// kept connection where the framing allows it.
func TestTransportBodies(t *testing.T) {
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
			c := scrapeClient(t, time.Minute)
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

// TestTransportRetriesClosedIdleConnection: an engine that closes a kept
// connection while it is idle costs one new connection, not a failed scrape.
func TestTransportRetriesClosedIdleConnection(t *testing.T) {
	s := newRawServer(t, true, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") // closes after each answer, without saying so
	c := scrapeClient(t, time.Minute)
	for i := range 3 {
		if code, body, err := get(t, c, s.url); err != nil || code != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q %v", i, code, body, err)
		}
		time.Sleep(20 * time.Millisecond) // let the close arrive
	}
	if got := s.conns.Load(); got != 3 {
		t.Errorf("%d connections, want 3 (each kept one found closed and replaced)", got)
	}
	waitOpen(t, s.open.Load, 1, "after the engine closed each")
}

// TestTransportFailures: what the scraper classifies comes out as net/http
// gives it: the context's error for a deadline, an error for garbage,
// oversized headers or a body cut short, and no connection kept from a failed
// or unfinished exchange.
func TestTransportFailures(t *testing.T) {
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
		c := scrapeClient(t, time.Minute)
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
		var open atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte("half"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		}
		srv.Start()
		defer srv.Close()
		defer close(release)
		c := scrapeClient(t, time.Minute)
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
		waitOpen(t, open.Load, 0, "after a failed body")
	})
	const maxHeaderBytes = 10 << 20 // net/http's default MaxResponseHeaderBytes
	for _, tt := range []struct{ name, response string }{
		{"not HTTP", "SSH-2.0-OpenSSH_9.6\r\n"},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"},
		{"headers too large", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newRawServer(t, false, tt.response)
			c := scrapeClient(t, time.Minute)
			if _, _, err := get(t, c, s.url); err == nil {
				t.Errorf("no error from %q", tt.response[:min(40, len(tt.response))])
			}
			waitOpen(t, s.open.Load, 0, "after a failure")
		})
	}
	t.Run("body closed early", func(t *testing.T) {
		s := newRawServer(t, false, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		c := scrapeClient(t, time.Minute)
		req, _ := http.NewRequest(http.MethodGet, s.url, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = resp.Body.Read(make([]byte, 2))
		resp.Body.Close()
		waitOpen(t, s.open.Load, 0, "after an unread body")
	})
}

// TestTransportIdleTimeout: idle connections are closed after the idle
// timeout, and none is kept beyond two per engine.
func TestTransportIdleTimeout(t *testing.T) {
	s := newRawServer(t, false, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	c := scrapeClient(t, 100*time.Millisecond)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			<-release
			if _, _, err := get(t, c, s.url); err != nil {
				t.Error(err)
			}
		})
	}
	close(release)
	wg.Wait()
	waitOpen(t, s.open.Load, maxIdleConnsPerEngine, "to one engine")
	waitOpen(t, s.open.Load, 0, "long after the idle timeout")
}
