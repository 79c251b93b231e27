package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// Defaults of the memory bounds of Options.
const (
	// DefaultInflightBytes bounds what the scrapes in flight hold while they
	// read and extract bodies: 128 MiB, 2 MiB per slot at the default
	// concurrency of 64 (a usual body takes minInflight, 1 MiB); one
	// namespace may hold at most a quarter of it. 64 pods of one
	// namespace serving 1.17 MB bodies of 19,999 duplicate series (within
	// every other bound) held a replica at 417–524 MiB without it (issue 20).
	DefaultInflightBytes = 128 << 20
	// DefaultReadingsBytes bounds what each namespace's kept readings (every
	// pod's History) may hold: 128 MiB, about 2,000 vLLM pods whose policies
	// read every term kind (histograms and 5-minute windows), or 10,000 with
	// the built-in policies. A pod whose new reading would take its
	// namespace past it is not stored (ReasonOverBudget) and ages into
	// unknown, as a failing pod does.
	DefaultReadingsBytes = 128 << 20
	// inflightFactor is what a scrape may hold per byte of body: the body's
	// buffer (up to twice its size as it grows), its filtered lines, the
	// parsed samples and their labels. Measured: the first extraction of a
	// 1.86 MB body of 19,999 duplicate series held 13 times its size (and
	// allocated 25 times), later ones (the series cache warm) much less.
	inflightFactor = 16
	// minInflight is the least a scrape reserves, before its body's size is
	// known: enough for a 64 KiB body (a vLLM pod's is 47 KB), so that a
	// usual scrape never grows its share.
	minInflight = inflightFactor * (64 << 10)
)

// errOverBudget: a reading would take its namespace past Options.ReadingsBytes.
var errOverBudget = errors.New("over the namespace's readings budget")

// budget accounts the bytes of readings: held by scrapes in flight (a total
// and a share per namespace) and kept in each namespace's histories. It is
// safe for concurrent use.
type budget struct {
	inflightMax, inflightShare, keptMax int64

	mu         sync.Mutex
	inflight   int64
	inflightNS map[string]int64
	// changed is closed (and replaced) when in-flight bytes are released.
	changed chan struct{}
	keptNS  map[string]int64
	keptPod map[types.UID]kept
}

type kept struct {
	namespace string
	bytes     int64
}

func newBudget(inflight, readings int64) *budget {
	if inflight <= 0 {
		inflight = DefaultInflightBytes
	}
	if readings <= 0 {
		readings = DefaultReadingsBytes
	}
	return &budget{inflightMax: inflight, inflightShare: max(inflight/4, minInflight), keptMax: readings,
		inflightNS: map[string]int64{}, changed: make(chan struct{}), keptNS: map[string]int64{}, keptPod: map[types.UID]kept{}}
}

// hold is what one scrape holds of the in-flight budget.
type hold struct {
	b         *budget
	namespace string
	bytes     int64
}

// acquire makes h, which holds nothing yet, hold n bytes (at most the
// namespace's share), waiting until they fit or ctx ends: it waits holding
// nothing, so scrapes never wait on each other. Errors: ctx's.
func (h *hold) acquire(ctx context.Context, n int64) error {
	for {
		ok, ch := h.tryGrow(n)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d bytes of the scrapes' memory bound (%d in flight at most, %d per namespace): %w",
				min(n, h.b.inflightShare), h.b.inflightMax, h.b.inflightShare, ctx.Err())
		case <-ch:
		}
	}
}

// tryGrow makes h hold at least n bytes (at most the namespace's share) if
// they fit now; else it changes nothing and returns a channel closed when
// bytes are released. A scrape whose body turns out larger than it first
// held grows without waiting: one that cannot fails (errInflight) and lets go
// of what it read, so that no scrape ever waits holding bytes another
// waits for.
func (h *hold) tryGrow(n int64) (bool, <-chan struct{}) {
	b := h.b
	n = min(n, b.inflightShare)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n <= h.bytes {
		return true, nil
	}
	extra := n - h.bytes
	if b.inflight+extra <= b.inflightMax && b.inflightNS[h.namespace]+extra <= b.inflightShare {
		b.inflight += extra
		b.inflightNS[h.namespace] += extra
		h.bytes = n
		return true, nil
	}
	return false, b.changed
}

// errInflight: a body grew past what the scrapes' memory bound had room for.
var errInflight = errors.New("the body is larger than the room the scrapes' memory bound leaves")

// release gives back what h holds.
func (h *hold) release() {
	h.b.mu.Lock()
	h.b.releaseLocked(h)
	h.b.mu.Unlock()
}

func (b *budget) releaseLocked(h *hold) {
	if h.bytes == 0 {
		return
	}
	b.inflight -= h.bytes
	if b.inflightNS[h.namespace] -= h.bytes; b.inflightNS[h.namespace] <= 0 {
		delete(b.inflightNS, h.namespace)
	}
	h.bytes = 0
	close(b.changed)
	b.changed = make(chan struct{})
}

// keep charges a pod's new history of n bytes to its namespace, replacing
// what the pod's previous one was charged; errOverBudget, charging nothing,
// when it does not fit.
func (b *budget) keep(uid types.UID, namespace string, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.keptPod[uid]
	delta := n - old.bytes
	if delta > 0 && b.keptNS[namespace]+delta > b.keptMax {
		return fmt.Errorf("%w: its readings hold %d bytes, this pod's would take them to %d, more than %d (--scrape-readings-budget-bytes)",
			errOverBudget, b.keptNS[namespace], b.keptNS[namespace]+delta, b.keptMax)
	}
	b.keptNS[namespace] += delta
	b.keptPod[uid] = kept{namespace: namespace, bytes: n}
	return nil
}

// forget stops charging a pod's history (the pod left the scrape set).
func (b *budget) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.keptPod[uid]
	if !ok {
		return
	}
	delete(b.keptPod, uid)
	if b.keptNS[k.namespace] -= k.bytes; b.keptNS[k.namespace] <= 0 {
		delete(b.keptNS, k.namespace)
	}
}

// growingReader reads a body while making its hold cover inflightFactor
// times what was read.
type growingReader struct {
	r    io.Reader
	h    *hold
	read int64
}

func (g *growingReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.read += int64(n)
	if want := inflightFactor * g.read; want > g.h.bytes {
		// Ahead of need, so that a growing body asks rarely; a body past
		// the namespace's share is read within the share.
		if ok, _ := g.h.tryGrow(2 * want); !ok {
			return n, fmt.Errorf("%w (%d bytes read, %d held; --scrape-inflight-bytes)", errInflight, g.read, g.h.bytes)
		}
	}
	return n, err
}

// Footprint estimates, in bytes, what a History holds: its readings (their
// engines, histograms' counts, strings and gateway series; histogram bounds
// are shared between readings and counted in each, as an upper bound), the
// packed histograms of its older readings, and a quarter more for its window
// aggregates and engine facts.
func Footprint(h *history.History) int64 {
	n := h.PackedBytes()
	for _, r := range h.Readings() {
		n += readingFootprint(r)
	}
	return n + n/4
}

func readingFootprint(r *signals.Reading) int64 {
	n := int64(512)
	for _, m := range r.Models {
		n += 16 + int64(len(m))
	}
	for _, w := range r.Warnings {
		n += 16 + int64(len(w))
	}
	for i := range r.Engines {
		e := &r.Engines[i]
		n += 256 + int64(len(e.ID)+len(e.Model))
		for _, hist := range e.Hist {
			if hist != nil {
				n += 64 + 8*int64(len(hist.Counts)+len(hist.Bounds))
			}
		}
	}
	for _, hist := range r.Hist {
		if hist != nil {
			n += 64 + 8*int64(len(hist.Counts)+len(hist.Bounds))
		}
	}
	for i := range r.Gateway {
		n += 96 + int64(len(r.Gateway[i].Metric))
		for k, v := range r.Gateway[i].Labels {
			n += 32 + int64(len(k)+len(v))
		}
	}
	return n
}
