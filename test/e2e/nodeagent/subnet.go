package nodeagent

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Subnets a lease hands out: the second octet of 127.<n>.y.z. Below 16 is left
// alone (the control plane listens on 127.0.0.1), and 254 is for Service ranges
// (127.254.<n>.0/24, where n is a leased subnet).
const (
	firstSubnet = 16
	lastSubnet  = 250
)

// leaseDir holds a lock file per subnet (a test of the leases uses its own).
var leaseDir = filepath.Join(os.TempDir(), "saturation-adapter-e2e-subnets")

// SubnetLease holds one subnet for this process until Release: no other lease on
// the machine (any process, any test) gets it meanwhile. A lease is an exclusive
// flock(2) on a file per subnet under the temporary directory, so the kernel frees
// it when the process exits, however it exits.
type SubnetLease struct {
	Subnet byte
	f      *os.File
}

// LeaseSubnet leases a free subnet in [16, 250], trying them from a random start.
// Errors: every subnet leased (or the lock directory unusable).
func LeaseSubnet() (*SubnetLease, error) {
	if err := os.MkdirAll(leaseDir, 0o777); err != nil {
		return nil, fmt.Errorf("subnet leases: %w", err)
	}
	n := lastSubnet - firstSubnet + 1
	start := rand.IntN(n)
	for i := range n {
		s := firstSubnet + (start+i)%n
		f, err := os.OpenFile(filepath.Join(leaseDir, strconv.Itoa(s)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, fmt.Errorf("subnet leases: %w", err)
		}
		switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
		case err == nil:
			return &SubnetLease{Subnet: byte(s), f: f}, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			_ = f.Close() // leased elsewhere
		default:
			_ = f.Close()
			return nil, fmt.Errorf("subnet lease %d: %w", s, err)
		}
	}
	return nil, fmt.Errorf("all %d subnets 127.%d-%d.0.0/16 are leased", n, firstSubnet, lastSubnet)
}

// Release frees the subnet (closing the file drops the lock). Call it once nothing
// listens on the subnet's addresses any more: an agent releases its lease after Stop.
func (l *SubnetLease) Release() { _ = l.f.Close() }
