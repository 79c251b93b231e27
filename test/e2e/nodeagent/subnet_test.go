package nodeagent

import "testing"

// Leases held at once are distinct, and a released subnet can be leased again:
// concurrent agents never share pod addresses.
func TestLeaseSubnet(t *testing.T) {
	leaseDir = t.TempDir() // not the machine's: this test leases every subnet
	held := map[byte]*SubnetLease{}
	t.Cleanup(func() {
		for _, l := range held {
			l.Release()
		}
	})
	for range 40 {
		l, err := LeaseSubnet()
		if err != nil {
			t.Fatal(err)
		}
		if l.Subnet < firstSubnet || l.Subnet > lastSubnet {
			t.Fatalf("leased subnet %d, outside [%d, %d]", l.Subnet, firstSubnet, lastSubnet)
		}
		if held[l.Subnet] != nil {
			t.Fatalf("subnet %d leased twice", l.Subnet)
		}
		held[l.Subnet] = l
	}
	// Release all but one; 235 - 1 are free again.
	var kept byte
	for s, l := range held {
		if kept == 0 {
			kept = s
			continue
		}
		l.Release()
		delete(held, s)
	}
	for range lastSubnet - firstSubnet {
		l, err := LeaseSubnet()
		if err != nil {
			t.Fatalf("with one subnet leased: %v", err)
		}
		if l.Subnet == kept {
			t.Fatalf("subnet %d leased while held", kept)
		}
		held[l.Subnet] = l
	}
	if l, err := LeaseSubnet(); err == nil {
		t.Fatalf("every subnet held, yet leased %d", l.Subnet)
	}
}
