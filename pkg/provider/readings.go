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

// Scraped returns the Readings of direct mode: each pod's result in s, by UID
// (a re-created pod never inherits its predecessor's readings), after
// scraping on the spot, within coldScrapeTimeout, the counted members never
// scraped (the first request for a selector nobody asked about before); 0
// disables that.
func Scraped(s ScrapeStore, coldScrapeTimeout time.Duration) Readings {
	return scraped{store: s, coldTimeout: coldScrapeTimeout}
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
