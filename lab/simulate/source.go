package simulate

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// This file is the only one that imports pkg/signals: everything the simulated
// adapter and the simulated Prometheus know about an engine passes through a
// MetricSource, so a new signal catalog is wired here and nowhere else.

// MetricSource is what the simulation needs of the adapter's signal code: it reads
// pods' /metrics bodies as the adapter's scraper does and answers metric queries as
// the adapter's provider does. Pods are identified by the fleet's pod IDs. One
// source serves one fleet; it is not safe for concurrent use.
type MetricSource interface {
	// Scrape records one successful scrape of pod's /metrics body, replacing its
	// previous reading. An error (the body does not parse, no engine metric) leaves
	// the pod without a reading, as a failed scrape does.
	Scrape(pod int, body []byte) error
	// Forget drops what is kept about pod.
	Forget(pod int)
	// External returns the value of the External metric over a pool: the pods in
	// fresh have a fresh scrape (their latest Scrape), unknown more counted pods
	// have none. It fails where the adapter answers an error (no pod, no pod with
	// data, a signal no pod exposes): the HPA then holds.
	External(metric string, fresh []int, unknown int) (float64, error)
	// PodValue returns pod's value of a per-pod (custom.metrics.k8s.io, HPA type
	// Pods) metric from its latest scrape; false when the adapter leaves the pod out.
	PodValue(metric string, pod int) (float64, bool)
	// Metrics lists the External metrics served (perPod false) or the per-pod
	// metrics (perPod true).
	Metrics(perPod bool) []string
}

// The metric names of the adapter's built-in catalog (policy.BuiltinCatalog).
const (
	// MetricSaturation is the pool's mean per-pod saturation (target type Value).
	MetricSaturation = policy.MetricSaturation
	// MetricDemandReplicas is the sum of per-pod saturations (target type AverageValue).
	MetricDemandReplicas = policy.MetricDemandReplicas
	// MetricQueueDepth is the pool's total of waiting requests.
	MetricQueueDepth = policy.MetricQueueDepth
	// MetricRunning is the pool's total of running requests.
	MetricRunning = policy.MetricRunning
	// MetricKVCacheUsage is the pool's mean KV-cache usage ratio.
	MetricKVCacheUsage = policy.MetricKVCacheUsage
)

// NewAdapterSource returns a factory of MetricSources that compute exactly what
// the adapter serves with its built-in catalog (policy.BuiltinCatalog):
// extraction (signals.Extractor), per-pod scores max(queue / queueDepthSetPoint,
// kv / kvCacheUsageSetPoint) and pooling (policy.PoolBuilder), pods without a
// fresh reading counted at unknownSaturation. It fails where the catalog does
// (set points policy.SetPoints.Validate rejects, a negative or infinite unknown
// saturation).
func NewAdapterSource(queueDepthSetPoint, kvCacheUsageSetPoint, unknownSaturation float64) (func() MetricSource, error) {
	c, err := policy.BuiltinCatalog(policy.SetPoints{QueueDepth: queueDepthSetPoint, KVCacheUsage: kvCacheUsageSetPoint}, unknownSaturation)
	if err != nil {
		return nil, err
	}
	return CatalogSource(c), nil
}

// CatalogSource returns a factory of MetricSources that serve the policies of a
// signals catalog: each External metric is its policy's pool value, each per-pod
// metric its policy's per-pod value. This is where a new catalog plugs in.
func CatalogSource(c *policy.Catalog) func() MetricSource {
	ex := signals.NewExtractor() // immutable, shared by the sources
	return func() MetricSource {
		return &adapterSource{ex: ex, catalog: c, pods: map[int]*history.History{}}
	}
}

// defaultAdapterSource is NewAdapterSource with the adapter's defaults
// (policy.DefaultSetPoints, policy.DefaultUnknownSaturation).
func defaultAdapterSource() func() MetricSource {
	sp := policy.DefaultSetPoints()
	f, err := NewAdapterSource(sp.QueueDepth, sp.KVCacheUsage, policy.DefaultUnknownSaturation)
	if err != nil {
		return func() MetricSource { return failingSource{err} }
	}
	return f
}

// adapterSetPoints returns the adapter's default set points (policy.DefaultSetPoints).
func adapterSetPoints() (queueDepth, kvCacheUsage float64) {
	sp := policy.DefaultSetPoints()
	return sp.QueueDepth, sp.KVCacheUsage
}

// failingSource answers every query with an error (defaults that do not
// validate: cannot happen while the defaults are sane, but never a crash).
type failingSource struct{ err error }

func (f failingSource) Scrape(int, []byte) error                     { return f.err }
func (f failingSource) Forget(int)                                   {}
func (f failingSource) External(string, []int, int) (float64, error) { return 0, f.err }
func (f failingSource) PodValue(string, int) (float64, bool)         { return 0, false }
func (f failingSource) Metrics(bool) []string                        { return nil }

type adapterSource struct {
	ex      *signals.Extractor
	catalog *policy.Catalog
	pods    map[int]*history.History
	// seq orders the readings: the simulation decides freshness itself (the
	// fresh pods of External), so readings carry a sequence, not a clock.
	seq int64
}

// sourceEpoch is the time of the first reading of a source; each reading is one
// millisecond after the one before.
var sourceEpoch = time.Unix(0, 0)

// anyAge accepts every reading: freshness is the caller's decision.
const anyAge = time.Duration(math.MaxInt64)

func (s *adapterSource) Scrape(pod int, body []byte) error {
	r, err := s.ex.Extract(body)
	if err != nil {
		delete(s.pods, pod)
		return err
	}
	s.seq++
	r.Time = sourceEpoch.Add(time.Duration(s.seq) * time.Millisecond)
	s.pods[pod] = s.pods[pod].Append(&r, history.HistoryOptions{Needs: s.catalog.Needs()})
	return nil
}

// now is the time of the newest reading.
func (s *adapterSource) now() time.Time {
	return sourceEpoch.Add(time.Duration(s.seq) * time.Millisecond)
}

func (s *adapterSource) Forget(pod int) { delete(s.pods, pod) }

func (s *adapterSource) Metrics(perPod bool) []string {
	if perPod {
		return s.catalog.PerPodNames()
	}
	return s.catalog.Names()
}

// External pools as pkg/provider does (Provider.compute and its pool): no pod is
// an error, no known pod is an error, no pod exposing the signal is an error.
func (s *adapterSource) External(metric string, fresh []int, unknown int) (float64, error) {
	p := s.catalog.Lookup(metric)
	if p == nil {
		return 0, fmt.Errorf("unknown metric %q", metric)
	}
	b := p.NewPool(s.now(), anyAge)
	for _, id := range fresh {
		b.Add(s.pods[id], "") // nil for a pod whose last scrape failed to parse
	}
	for range unknown {
		b.Add(nil, "no fresh reading")
	}
	pool := b.Pool()
	switch {
	case pool.Pods == 0:
		return 0, errors.New("no pod is Running and Ready")
	case pool.Known == 0:
		return 0, fmt.Errorf("%d Ready pods, none has fresh data", pool.Pods)
	case pool.Value == nil && p.Kind == policy.KindSignal && pool.Fresh+pool.Held < pool.Pods:
		// As the provider answers (issue 20): a raw signal is unknown while a pod has
		// neither fresh data nor a held value.
		return 0, fmt.Errorf("%d of the %d Ready pods have no fresh data: %s is unknown until they report", pool.Pods-pool.Fresh-pool.Held, pool.Pods, metric)
	case pool.Value == nil:
		return 0, fmt.Errorf("none of the %d pods with fresh data exposes %s", pool.Known, metric)
	}
	return *pool.Value, nil
}

func (s *adapterSource) PodValue(metric string, pod int) (float64, bool) {
	p := s.catalog.Lookup(metric)
	h := s.pods[pod]
	if p == nil || !p.PerPod() || h == nil {
		return 0, false
	}
	b := p.NewPool(s.now(), anyAge)
	v := b.Add(h, "")
	return v.Value, v.Present
}
