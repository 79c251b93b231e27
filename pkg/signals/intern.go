package signals

import (
	"slices"
	"strings"
	"sync"
)

// What every reading of every pod repeats is kept once per Extractor and
// shared: the names of the sources read, the Sources maps that hold them, and
// engine IDs and model names (which would otherwise keep each series' whole
// label set alive). At 10,000 pods × 24 readings that is tens of megabytes.
// Shared values are never modified.

// sourceNames holds the name Reading.Sources gives each alternative of each
// dialect in each spelling: sets[dialect][signal][alternative][spelling] and
// histos[dialect][histogram][alternative][spelling].
type sourceNames struct {
	sets   [][NumSignals][][]string
	histos [][NumHistos][][]string
}

func newSourceNames(dialects []Dialect) sourceNames {
	n := sourceNames{sets: make([][NumSignals][][]string, len(dialects)), histos: make([][NumHistos][][]string, len(dialects))}
	for di := range dialects {
		d := &dialects[di]
		for s := range NumSignals {
			for _, ss := range d.Sources[s] {
				names := make([]string, d.spellings())
				for k := range names {
					names[k] = spellSet(d, ss, k)
				}
				n.sets[di][s] = append(n.sets[di][s], names)
			}
		}
		for h := range NumHistos {
			for _, hs := range d.Histos[h] {
				names := make([]string, d.spellings())
				for k := range names {
					names[k] = d.spell(hs.Metric, k)
				}
				n.histos[di][h] = append(n.histos[di][h], names)
			}
		}
	}
	return n
}

// set returns the name of alternative p of signal s in spelling k.
func (n *sourceNames) set(dialect int, s Signal, p, k int) string { return n.sets[dialect][s][p][k] }

func spellSet(d *Dialect, ss SourceSet, k int) string {
	if k != 0 {
		ss.Sources = slices.Clone(ss.Sources)
		for i := range ss.Sources {
			ss.Sources[i].Metric = d.spell(ss.Sources[i].Metric, k)
		}
	}
	return ss.String()
}

// sourcesKey identifies the content of a Reading.Sources map: the dialect and
// spelling read, and per signal and histogram the alternative read (-1: none).
type sourcesKey struct {
	dialect, spelling int8
	sets              [NumSignals]int8
	histos            [NumHistos]int8
}

// sourcesCache shares Reading.Sources maps between readings with the same
// sources. Bounded: past maxSourceMaps distinct keys a reading gets a map of
// its own.
type sourcesCache struct {
	mu sync.RWMutex
	m  map[sourcesKey]map[string]string
}

const maxSourceMaps = 256

// get returns the Sources map of key.
func (c *sourcesCache) get(key sourcesKey, names *sourceNames) map[string]string {
	c.mu.RLock()
	m, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return m
	}
	m = map[string]string{}
	for s := range NumSignals {
		if p := key.sets[s]; p >= 0 {
			m[s.String()] = names.set(int(key.dialect), s, int(p), int(key.spelling))
		}
	}
	for h := range NumHistos {
		if p := key.histos[h]; p >= 0 {
			m[h.String()] = names.histos[key.dialect][h][p][key.spelling]
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, ok := c.m[key]; ok {
		return got
	}
	if c.m == nil {
		c.m = map[sourcesKey]map[string]string{}
	}
	if len(c.m) < maxSourceMaps {
		c.m[key] = m
	}
	return m
}

// stringCache interns engine IDs and model names. Bounded: past
// maxInternedStrings distinct strings, new ones are copied rather than
// interned (a copy still frees the label set it came from).
type stringCache struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxInternedStrings = 4096

// intern returns s, or the equal string seen before; never a string sharing
// memory with s.
func (c *stringCache) intern(s string) string {
	if s == "" {
		return ""
	}
	c.mu.RLock()
	v, ok := c.m[s]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = strings.Clone(s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, ok := c.m[v]; ok {
		return got
	}
	if c.m == nil {
		c.m = map[string]string{}
	}
	if len(c.m) < maxInternedStrings {
		c.m[v] = v
	}
	return v
}
