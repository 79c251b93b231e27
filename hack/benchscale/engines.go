package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
)

// roleEnv names the role a child process plays: roleEngines or roleAdapter.
const roleEnv = "BENCHSCALE_ROLE"

const (
	roleEngines = "engines"
	roleAdapter = "adapter"
)

// engineBatch is the most engines one process serves: a listener and a
// connection each, 8,000 open files, under the usual hard limit of 10,000 or
// more.
const engineBatch = 4000

// runRole runs the role of a child process until its standard input closes.
func runRole(role string, args []string) error {
	switch role {
	case roleEngines:
		return runEngines(args)
	case roleAdapter:
		return runAdapter(args)
	}
	return fmt.Errorf("unknown role %q (want %s or %s)", role, roleEngines, roleAdapter)
}

// engineAddr returns the loopback address of engine i: 127.1.0.1 to
// 127.1.255.250, skipping .0 and the upper addresses of each /24, so that every
// engine has an IP of its own, as pods do (and the adapter's connections need
// no more than one ephemeral port each per engine).
func engineAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(i%250 + 1)})
}

// maxEngines is the number of addresses engineAddr has.
const maxEngines = 256 * 250

// runEngines serves the dump on engines -first to -first+count-1, each on its
// own loopback IP and a port the kernel picks, writes their addresses
// ("ip:port") as one JSON array line to stdout and serves until stdin closes.
func runEngines(args []string) error {
	fs := flag.NewFlagSet(roleEngines, flag.ContinueOnError)
	first := fs.Int("first", 0, "index of the first engine")
	count := fs.Int("count", 1, "number of engines")
	dump := fs.String("dump", "", "the /metrics body to serve")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *count < 1 || *first < 0 || *first+*count > maxEngines {
		return fmt.Errorf("engines %d..%d: want 0 <= first, 1 <= count, first+count <= %d", *first, *first+*count-1, maxEngines)
	}
	body, err := os.ReadFile(*dump)
	if err != nil {
		return err
	}
	if err := raiseFileLimit(uint64(2**count + 64)); err != nil {
		return err
	}
	response := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"), body...)
	addrs := make([]string, *count)
	listeners := make([]net.Listener, *count)
	for i := range addrs {
		l, err := net.Listen("tcp", netip.AddrPortFrom(engineAddr(*first+i), 0).String())
		if err != nil {
			return fmt.Errorf("listener of engine %d: %w", *first+i, err)
		}
		addrs[i], listeners[i] = l.Addr().String(), l
		go serveEngine(l, response)
	}
	if err := json.NewEncoder(os.Stdout).Encode(addrs); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the driver closes stdin or exits
	for _, l := range listeners {
		_ = l.Close()
	}
	return nil
}

// serveEngine answers every request on l's connections with response: a
// minimal HTTP/1.1 server with keep-alive for requests without a body, as
// the adapter's scrapes are (GET). Lighter than net/http's server, so that
// the stand-ins take less of the CPU the adapter is measured on; the adapter
// reads the same bytes either way.
func serveEngine(l net.Listener, response []byte) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(os.Stderr, "engine %s: %v\n", l.Addr(), err)
			}
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				// The request line and headers, up to the blank line.
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						return
					}
					if len(line) <= 2 {
						break
					}
				}
				if _, err := c.Write(response); err != nil {
					return
				}
			}
		}()
	}
}
