package history

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// A compact History holds the latency histograms of a reading older than the
// newest as a pack when the pair it forms with the next reading is smooth
// (smoothPair): the reading keeps its engines, gauges and counters, its
// histograms are dropped (Engines[i].Hist and Hist nil), and the pack holds
// each histogram's Sum (8 bytes) and its Count and bucket counts, whole
// numbers in [0, maxWhole) (smoothPair checks both readings), as uvarints.
// Their bounds are the next reading's: a smooth pair shares its layouts, so
// every reading of a run of packed ones has the layouts of the first full
// reading after it. With the real vLLM V1 dump's three histograms (62
// buckets) a reading's histograms take 100–300 bytes instead of 700 (the
// Histogram headers and 8-byte counts).
//
// A whole number below 2^53 converts to and from uint64 exactly, so a rebuilt
// histogram is the original bit for bit (counts are never -0: whole excludes
// it), and a window reads a packed reading's counts as it read the plain
// one's: FuzzCompactHistory holds every window of a compact History to a
// plain one's.

// pack is one reading's histograms. Slots are the reading's engines in order
// and, per engine, its histogram kinds present; the pack holds each slot's
// Sum (8 bytes, float64 bits, little endian), then per slot the Count and
// each bucket's count as uvarints. nil: the reading holds its histograms.
type pack []byte

// slots returns the number of histograms of r (every engine's, every kind).
func slots(r *signals.Reading) int {
	n := 0
	for i := range r.Engines {
		for hk := range signals.NumHistos {
			if r.Engines[i].Hist[hk] != nil {
				n++
			}
		}
	}
	return n
}

// encodePack returns r's histograms as a pack, nil when r has none (nothing
// to save). Their counts must be whole numbers in [0, maxWhole) (whole).
func encodePack(r *signals.Reading) pack {
	n := slots(r)
	if n == 0 {
		return nil
	}
	size := 8 * n
	for ei := range r.Engines {
		for _, h := range r.Engines[ei].Hist {
			if h != nil {
				size += uvarintLen(uint64(h.Count))
				for _, c := range h.Counts {
					size += uvarintLen(uint64(c))
				}
			}
		}
	}
	p := make(pack, size)
	at := 0
	for ei := range r.Engines {
		for _, h := range r.Engines[ei].Hist {
			if h != nil {
				binary.LittleEndian.PutUint64(p[at:], math.Float64bits(h.Sum))
				at += 8
			}
		}
	}
	for ei := range r.Engines {
		for _, h := range r.Engines[ei].Hist {
			if h != nil {
				at += binary.PutUvarint(p[at:], uint64(h.Count))
				for _, c := range h.Counts {
					at += binary.PutUvarint(p[at:], uint64(c))
				}
			}
		}
	}
	return p
}

func uvarintLen(d uint64) int {
	n := 1
	for d >= 0x80 {
		d >>= 7
		n++
	}
	return n
}

// sum returns the Sum of slot s.
func (p pack) sum(s int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(p[8*s:]))
}

// strip returns a copy of r without its histograms (its engines copied).
func strip(r *signals.Reading) *signals.Reading {
	c := *r
	c.Engines = slices.Clone(r.Engines)
	for i := range c.Engines {
		c.Engines[i].Hist = [signals.NumHistos]*signals.Histogram{}
	}
	c.Hist = [signals.NumHistos]*signals.Histogram{}
	return &c
}

// unpack returns stripped (a reading stripped of its histograms, p its pack)
// with its engines' histograms rebuilt, on the layouts of tmpl (the first
// full reading after it). The pod-level Hist (the fold's) stays nil: windows
// read the engines'.
func unpack(stripped *signals.Reading, p pack, tmpl *signals.Reading) *signals.Reading {
	c := *stripped
	c.Engines = slices.Clone(stripped.Engines)
	s := 0
	rd := packReader{p: p, at: 8 * slots(tmpl)}
	for ei := range tmpl.Engines {
		for hk, h := range tmpl.Engines[ei].Hist {
			if h == nil {
				continue
			}
			o := &signals.Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Count: rd.next(), Sum: p.sum(s)}
			for b := range o.Counts {
				o.Counts[b] = rd.next()
			}
			c.Engines[ei].Hist[hk] = o
			s++
		}
	}
	return &c
}

// chain is the readings of a History being built, oldest first, with their
// packs (nil: a plain History) and smooth flags (nil: no window is kept).
type chain struct {
	rs     []*signals.Reading
	pk     []pack
	sm     []bool
	packed bool // pack each reading whose pair with the next is smooth
}

// isPacked reports whether reading i holds its histograms as a pack.
func (c *chain) isPacked(i int) bool { return c.pk != nil && c.pk[i] != nil }

// full returns reading i with its histograms (rebuilt when packed).
func (c *chain) full(i int) *signals.Reading {
	if !c.isPacked(i) {
		return c.rs[i]
	}
	j := i + 1
	for c.isPacked(j) {
		j++
	}
	return unpack(c.rs[i], c.pk[i], c.rs[j])
}

// unpackAll makes every reading hold its histograms.
func (c *chain) unpackAll() {
	for i := len(c.rs) - 2; i >= 0; i-- {
		if c.isPacked(i) {
			c.rs[i], c.pk[i] = unpack(c.rs[i], c.pk[i], c.rs[i+1]), nil
		}
	}
}

// packAt packs reading i (holding its histograms) when the chain packs and
// its pair with the next reading is smooth.
func (c *chain) packAt(i int, smooth bool) {
	if !c.packed || !smooth {
		return
	}
	if p := encodePack(c.rs[i]); p != nil {
		c.rs[i], c.pk[i] = strip(c.rs[i]), p
	}
}

// push appends r, replacing the newest reading when r is not newer.
func (c *chain) push(r *signals.Reading) {
	if n := len(c.rs); n > 0 && !r.At().After(c.rs[n-1].At()) {
		if n > 1 && c.isPacked(n-2) {
			c.rs[n-2], c.pk[n-2] = c.full(n-2), nil
		}
		c.rs = c.rs[:n-1]
		if c.pk != nil {
			c.pk = c.pk[:n-1]
		}
		if c.sm != nil {
			c.sm = c.sm[:n-1]
		}
	}
	n := len(c.rs)
	smooth := false
	if c.sm != nil {
		smooth = n > 0 && smoothPair(c.rs[n-1], r)
		c.sm = append(c.sm, smooth)
	}
	c.rs = append(c.rs, r)
	if c.pk != nil {
		c.pk = append(c.pk, nil)
		if n > 0 {
			c.packAt(n-1, smooth)
		}
	}
}

// dropFront drops the readings before i.
func (c *chain) dropFront(i int) {
	c.rs = c.rs[i:]
	if c.pk != nil {
		c.pk = c.pk[i:]
	}
	if c.sm != nil {
		c.sm = c.sm[i:]
		c.sm[0] = false
	}
}

// deleteAt removes reading i (0 < i < len-1): reading i-1 stays packed (or
// is packed) when its pair with reading i+1 is smooth, else it holds its
// histograms.
func (c *chain) deleteAt(i int) {
	smooth := false
	if c.sm != nil {
		// smoothPair is transitive: two smooth pairs make a smooth one.
		smooth = c.sm[i] && c.sm[i+1] || smoothPair(c.full(i-1), c.full(i+1))
	}
	switch {
	case c.isPacked(i-1) && !smooth:
		c.rs[i-1], c.pk[i-1] = c.full(i-1), nil
	case !c.isPacked(i-1) && c.pk != nil:
		c.packAt(i-1, smooth)
	}
	c.rs = slices.Delete(c.rs, i, i+1)
	if c.pk != nil {
		c.pk = slices.Delete(c.pk, i, i+1)
	}
	if c.sm != nil {
		c.sm = slices.Delete(c.sm, i, i+1)
		c.sm[i] = smooth
	}
}

// prune drops readings older than span before the newest (keeping the newest
// one at or before that start), then thins the older readings, never the
// newest minRecent, by removing the later reading of the closest pair until at
// most max remain.
func (c *chain) prune(span time.Duration, maxN int) {
	rs := c.rs
	start := rs[len(rs)-1].At().Add(-span)
	first := 0
	for i := range rs {
		if rs[i].At().After(start) {
			break
		}
		first = i
	}
	c.dropFront(first)
	for len(c.rs) > maxN {
		best, gap := -1, time.Duration(0)
		for i := 1; i < len(c.rs)-minRecent; i++ {
			if g := c.rs[i].At().Sub(c.rs[i-1].At()); best < 0 || g < gap {
				best, gap = i, g
			}
		}
		if best < 0 {
			break
		}
		c.deleteAt(best)
	}
}

// materialize returns rs with readings from i0 on holding their histograms.
func materialize(rs []*signals.Reading, pk []pack, i0 int) []*signals.Reading {
	out := slices.Clone(rs)
	for j := len(rs) - 2; j >= i0; j-- {
		if pk[j] != nil {
			out[j] = unpack(rs[j], pk[j], out[j+1])
		}
	}
	return out
}

// packedWindow is computeWindow's smooth path over packed readings: every
// reading from i0 to the one before the newest is packed, and, as telescope
// does, the window's observations are the newest reading's counts less the
// first's (rs[i0], read from its pack), over the engines keep selects (by
// index: a smooth window's readings have the same engines), with the Sums'
// differences added pair by pair in computeWindow's order.
func packedWindow(a *Window, rs []*signals.Reading, pk []pack, i0 int, keep func(*signals.EngineSignals) bool) {
	last := rs[len(rs)-1]
	var sums [signals.NumHistos]float64
	var summed [signals.NumHistos]bool
	for j := i0 + 1; j < len(rs); j++ {
		cur, prev := rs[j], rs[j-1]
		s := 0
		for ei := range last.Engines {
			e := &last.Engines[ei]
			kept := keep == nil || keep(e)
			if kept {
				a.addIncreases(&cur.Engines[ei], &prev.Engines[ei])
			}
			for hk, h := range e.Hist {
				if h == nil {
					continue
				}
				if kept {
					now := h.Sum
					if j < len(rs)-1 {
						now = pk[j].sum(s)
					}
					d := now - pk[j-1].sum(s)
					if d < 0 {
						d = 0
					}
					if summed[hk] {
						sums[hk] += d
					} else {
						sums[hk], summed[hk] = d, true
					}
				}
				s++
			}
		}
	}
	first := packReader{p: pk[i0], at: 8 * slots(last)}
	for ei := range last.Engines {
		e := &last.Engines[ei]
		kept := keep == nil || keep(e)
		for hk, h := range e.Hist {
			if h == nil {
				continue
			}
			count := first.next()
			if !kept {
				first.skip(len(h.Counts))
				continue
			}
			w := a.Histograms[hk]
			if w == nil {
				w = &signals.Histogram{Bounds: h.Bounds, Counts: make([]float64, len(h.Counts)), Sum: sums[hk]}
				a.Histograms[hk] = w
			}
			for b := range h.Counts {
				w.Counts[b] += h.Counts[b] - first.next()
			}
			w.Count += h.Count - count
		}
	}
}

// packReader reads a pack's uvarints in order.
type packReader struct {
	p  pack
	at int
}

func (r *packReader) next() float64 {
	if b := r.p[r.at]; b < 0x80 { // one byte: counts below 128
		r.at++
		return float64(b)
	}
	v, n := binary.Uvarint(r.p[r.at:])
	r.at += n
	return float64(v)
}

func (r *packReader) skip(n int) {
	for range n {
		_, k := binary.Uvarint(r.p[r.at:])
		r.at += k
	}
}

func isPack(p pack) bool { return p != nil }

// PackedBytes returns the bytes of the packs h holds (the histograms of its
// older readings, see Readings): what Readings' histograms no longer show.
func (h *History) PackedBytes() int64 {
	if h == nil {
		return 0
	}
	var n int64
	for _, p := range h.packs {
		n += int64(cap(p))
	}
	return n
}
