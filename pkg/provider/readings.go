package provider

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
	"github.com/saturation-adapter/saturation-adapter/pkg/scrape"
)

// Readings is where the provider reads pods' histories: the adapter's own
// scrapes (Scraped) or a time-series database (pkg/prometheus's Source).
// Implementations are safe for concurrent use.
type Readings interface {
	// Histories is called once per request with the members of one namespace's
	// pool (counted or not). It returns how to read each counted member's history
	// (nil when it has none) and, when that has no fresh reading, why; the
	// function is called once per counted member, right after. An error means
	// the source cannot answer for any pod (Prometheus is down): the request
	// fails with a 503 carrying the error's message, so keep it short.
	Histories(ctx context.Context, namespace string, members []podselect.Member) (func(*podselect.Member) (*history.History, string), error)
}

// ScrapeStore is what Scraped needs of a scrape.Scraper: the latest result of
// each pod and scrapes on demand.
type ScrapeStore interface {
	Latest(uid types.UID) (*scrape.Result, bool)
	Scrape(ctx context.Context, targets []scrape.Target)
}

// StoreWatcher is a ScrapeStore that says when it stores a result
// (scrape.Scraper.OnStore).
type StoreWatcher interface {
	OnStore(fn func(pod types.NamespacedName, uid types.UID))
}

// Scraped returns the Readings of direct mode: each pod's result in s, by UID
// (a re-created pod never inherits its predecessor's readings), after
// scraping on the spot, within coldScrapeTimeout, the counted members never
// scraped (the first request for a selector nobody asked about before); 0
// disables that. When s is a StoreWatcher the Readings are Watched: the
// provider keeps its pools as aggregates, updated as results are stored.
func Scraped(s ScrapeStore, coldScrapeTimeout time.Duration) Readings {
	sc := scraped{store: s, coldTimeout: coldScrapeTimeout}
	if w, ok := s.(StoreWatcher); ok {
		return watchedScraped{scraped: sc, w: w}
	}
	return sc
}

// watchedScraped is scraped over a store that says when it stores.
type watchedScraped struct {
	scraped
	w StoreWatcher
}

var _ Watched = watchedScraped{}

// Serve has nothing to wait for: the results are in memory.
func (watchedScraped) Serve(context.Context, string) error { return nil }

// Lookup returns a member's newest result, as Histories' function does.
func (s watchedScraped) Lookup(m *podselect.Member) (*history.History, string) { return s.history(m) }

// Watch tells fn about every result stored.
func (s watchedScraped) Watch(fn func(namespace string, uid types.UID)) {
	s.w.OnStore(func(pod types.NamespacedName, uid types.UID) { fn(pod.Namespace, uid) })
}

type scraped struct {
	store       ScrapeStore
	coldTimeout time.Duration
}

var _ Readings = scraped{}

func (s scraped) Histories(ctx context.Context, _ string, members []podselect.Member) (func(*podselect.Member) (*history.History, string), error) {
	s.scrapeCold(ctx, members)
	return s.history, nil
}

// history returns a member's readings and, when its newest scrape failed or it
// was never scraped, why.
func (s scraped) history(m *podselect.Member) (*history.History, string) {
	res, ok := s.store.Latest(m.UID)
	switch {
	case !ok && m.TargetErr != nil:
		return nil, "cannot be scraped: " + m.TargetErr.Error()
	case !ok:
		return nil, "not scraped yet"
	case res.Err != nil:
		return res.History, "scrape failing: " + res.Err.Error()
	case res.History == nil:
		return nil, "not scraped yet"
	}
	return res.History, ""
}

// scrapeCold scrapes, within the cold-scrape timeout, the counted members that
// were never scraped, so that the first request for a new selector gets an
// answer.
func (s scraped) scrapeCold(ctx context.Context, members []podselect.Member) {
	if s.coldTimeout <= 0 {
		return
	}
	var cold []scrape.Target
	for i := range members {
		m := &members[i]
		if !m.Counted || m.TargetErr != nil {
			continue
		}
		if _, ok := s.store.Latest(m.UID); ok {
			continue
		}
		cold = append(cold, m.Target)
	}
	if len(cold) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.coldTimeout)
	defer cancel()
	s.store.Scrape(ctx, cold)
}
