package scrape

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// plainTransport is the round tripper of plain-HTTP scrapes: HTTP/1.1 GETs
// over kept-alive connections, like net/http's Transport (which it hands
// everything else: https, other methods, bodies), but each exchange runs in
// the caller's goroutine. net/http passes every request to a writing
// goroutine and every response back from a reading one, two goroutines per
// connection for as long as it is open: three goroutine switches per scrape
// and 20,000 parked goroutines at 10,000 engines, together a third of the
// adapter's CPU in the load test's profile. The request is written by
// http.Request.Write and the response read by http.ReadResponse, so the bytes
// on the wire and the parsing are net/http's own.
//
// Like net/http, it keeps a connection when the response body was read to its
// end and neither side asked to close it, retries a GET once on a new
// connection when a kept one turns out closed by the engine before any byte of
// the response, bounds the response headers (maxHeaderBytes) and closes
// connections idle for longer than idleTimeout. A request's context cancels
// it at any point (dialing, writing, reading headers or body) with the
// context's error.
type plainTransport struct {
	next        http.RoundTripper
	dialer      net.Dialer
	idleTimeout time.Duration
	maxIdle     int // in all
	maxIdleHost int // per host:port

	mu       sync.Mutex
	idle     map[string][]*plainConn // by host:port, the most recently used last
	nIdle    int
	sweeping bool // a goroutine closes expired idle connections
}

// maxHeaderBytes bounds a response's status line and headers: net/http's
// default MaxResponseHeaderBytes.
const maxHeaderBytes = 10 << 20

// errHeaderTooLarge: the engine's response headers exceed maxHeaderBytes.
var errHeaderTooLarge = fmt.Errorf("response headers exceed %d bytes", maxHeaderBytes)

// plainConn is one connection to an engine and its buffers.
type plainConn struct {
	conn   net.Conn
	limit  limitedReader // caps the bytes the headers may take
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	idleAt time.Time
}

// limitedReader reads from r until n bytes were read, then fails with
// errHeaderTooLarge; n is set to the header limit while a response's headers
// are read and to MaxInt64 for its body.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func newPlainTransport(next http.RoundTripper, idleTimeout time.Duration) *plainTransport {
	return &plainTransport{next: next, idleTimeout: idleTimeout, maxIdle: 20000, maxIdleHost: 2, idle: map[string][]*plainConn{}}
}

// RoundTrip sends one request and returns its response, whose Body hands
// the connection back when read to its end.
func (t *plainTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for first := true; ; first = false {
		c, reused, err := t.conn(ctx, addr)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		_ = c.conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !first || !reused || !closedByPeer(err) {
			return nil, err
		}
		// The engine closed the kept connection while it was idle: once more
		// on a new one, as net/http does for a GET.
	}
}

// closedByPeer reports whether an exchange on a kept connection failed as one
// the engine had closed does: before any byte of the response.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// conn returns an idle connection to addr, else a new one.
func (t *plainTransport) conn(ctx context.Context, addr string) (*plainConn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.setIdle(addr, list[:len(list)-1])
		// Bytes buffered past the last response are an engine's garbage
		// (net/http closes such a connection too).
		if now.Sub(c.idleAt) <= t.idleTimeout && c.br.Buffered() == 0 {
			t.mu.Unlock()
			return c, true, nil
		}
		_ = c.conn.Close()
	}
	t.mu.Unlock()
	nc, err := t.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c := &plainConn{conn: nc, addr: addr}
	c.limit.r = nc
	c.br = bufio.NewReaderSize(&c.limit, connReadBufferBytes)
	c.bw = bufio.NewWriterSize(nc, connWriteBufferBytes)
	return c, false, nil
}

// setIdle sets addr's idle list and the count; t.mu is held.
func (t *plainTransport) setIdle(addr string, list []*plainConn) {
	t.nIdle += len(list) - len(t.idle[addr])
	if len(list) == 0 {
		delete(t.idle, addr)
		return
	}
	t.idle[addr] = list
}

// aLongTimeAgo is a deadline in the past: it fails pending I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes the request and reads the response's headers; the body is
// read by the caller.
func (t *plainTransport) exchange(ctx context.Context, c *plainConn, req *http.Request) (*http.Response, error) {
	if err := c.conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		return nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	c.limit.n = maxHeaderBytes
	// The first byte apart: an engine that closed the kept connection fails
	// here with io.EOF (ReadResponse would say io.ErrUnexpectedEOF), which
	// RoundTrip retries.
	if _, err := c.br.Peek(1); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(c.br, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(c.br, req) // informational: the answer follows
	}
	c.limit.n = math.MaxInt64
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		_ = resp.Body.Close()
		return fail(errors.New("the engine switched protocols"))
	}
	resp.Body = &plainBody{body: resp.Body, t: t, c: c, ctx: ctx, stop: stop, keep: !resp.Close && !req.Close}
	return resp, nil
}

// plainBody is a response body that hands its connection back to the idle
// pool when read to its end, and closes it otherwise.
type plainBody struct {
	body io.ReadCloser
	t    *plainTransport
	c    *plainConn
	ctx  context.Context
	stop func() bool
	keep bool
	done bool
}

func (b *plainBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.finish(true)
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.finish(false)
	}
	return n, err
}

// Close closes the connection unless the body was read to its end.
func (b *plainBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish ends the exchange: the connection goes back to the pool when the
// body was read to its end, may be kept and the context never fired.
func (b *plainBody) finish(atEOF bool) {
	b.done = true
	fired := !b.stop()
	if atEOF && b.keep && !fired {
		b.t.put(b.c)
		return
	}
	_ = b.c.conn.Close()
}

// put keeps an idle connection, or closes it past the bounds.
func (t *plainTransport) put(c *plainConn) {
	c.idleAt = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[c.addr]
	if t.nIdle >= t.maxIdle || len(list) >= t.maxIdleHost {
		_ = c.conn.Close()
		return
	}
	t.setIdle(c.addr, append(list, c))
	if !t.sweeping {
		t.sweeping = true
		go t.sweep()
	}
}

// sweep closes the connections idle for longer than idleTimeout, every half
// of it, until none is idle.
func (t *plainTransport) sweep() {
	tick := time.NewTicker(t.idleTimeout / 2)
	defer tick.Stop()
	for range tick.C {
		now := time.Now()
		t.mu.Lock()
		for addr, list := range t.idle {
			kept := list[:0]
			for _, c := range list {
				if now.Sub(c.idleAt) > t.idleTimeout {
					_ = c.conn.Close()
					continue
				}
				kept = append(kept, c)
			}
			clear(list[len(kept):])
			t.setIdle(addr, kept)
		}
		if t.nIdle == 0 {
			t.sweeping = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	}
}

// CloseIdleConnections closes the idle connections, this transport's and the
// next one's.
func (t *plainTransport) CloseIdleConnections() {
	t.mu.Lock()
	for addr, list := range t.idle {
		for _, c := range list {
			_ = c.conn.Close()
		}
		t.setIdle(addr, nil)
	}
	t.mu.Unlock()
	if ci, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
