package scrape

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Phase exposes phase to the package's external tests.
func Phase(uid types.UID, interval time.Duration) time.Duration { return phase(uid, interval) }

// Settled reports whether the schedule is at rest: Run's loop parked with its
// timer armed, no wake-up pending, and no scrape in progress but the hung ones
// (scrapes a test's server holds on purpose and that cannot end). A test steps
// its fake clock only when Settled, so that no timer is armed from a stale time.
func (s *Scraper) Settled(hung int) bool {
	sc := &s.sched
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.parked && len(sc.wake) == 0 && sc.active == hung
}
