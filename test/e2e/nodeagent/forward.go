package nodeagent

import (
	"io"
	"net"
	"sync"
)

// forwarder accepts TCP connections on an address and relays each to the address its to
// function picks: a pod's address to an engine that can only listen on a port of all
// interfaces (llm-d-inference-sim binds ":port"), standing in for the pod network
// namespace that would give each such engine its own port space; or a Service's
// ClusterIP and port to one of its Ready pods, as kube-proxy would (services.go).
type forwarder struct {
	l net.Listener
	// to picks the address each new connection is relayed to.
	to   func() (string, error)
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn map[net.Conn]struct{}
}

func newForwarder(listen string, to func() (string, error)) (*forwarder, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &forwarder{l: l, to: to, conn: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.relay(c)
		}()
	}
}

func (f *forwarder) track(c net.Conn, add bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		f.conn[c] = struct{}{}
	} else {
		delete(f.conn, c)
	}
}

func (f *forwarder) relay(in net.Conn) {
	defer in.Close()
	to, err := f.to()
	if err != nil {
		return
	}
	out, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer out.Close()
	f.track(in, true)
	f.track(out, true)
	defer f.track(in, false)
	defer f.track(out, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}

// Close stops accepting, closes every relayed connection and waits for the relays.
func (f *forwarder) Close() {
	f.l.Close()
	f.mu.Lock()
	for c := range f.conn {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
