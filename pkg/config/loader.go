package config

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultReloadInterval is how often the file is checked for changes: a
// mounted ConfigMap changes on disk within the kubelet's sync period (about a
// minute), so 10 s adds little to that.
const DefaultReloadInterval = 10 * time.Second

// MaxFileBytes bounds the configuration file: 1 MiB, a ConfigMap's own limit
// (etcd's request limit of 1.5 MiB with the object around it), and some
// thousand policies. A larger file is refused before it is read: a 50 MB file
// once took the adapter from 83 to 508 MiB and wrote a 48 MB log line.
const MaxFileBytes = 1 << 20

// MaxErrorBytes bounds the text of a load error (what the log, /readyz and the
// start-up failure show): a field's value is quoted in it, and the file may
// hold megabytes in one value.
const MaxErrorBytes = 4 << 10

// metricsNamespace prefixes every metric of the adapter.
const metricsNamespace = "saturation_adapter"

// Metrics are the configuration's self-metrics, on a registry the caller owns.
type Metrics struct {
	// LastReloadSuccessful is 1 when the last load of the file succeeded and 0
	// when it failed (the previous catalog is still served).
	LastReloadSuccessful prometheus.Gauge
	// LastReloadSuccessTime is the Unix time of the last successful load.
	LastReloadSuccessTime prometheus.Gauge
	// Policies is the number of metrics in the catalog in force.
	Policies prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		LastReloadSuccessful: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "config_last_reload_successful",
			Help: "1 when the last load of the --config file succeeded, 0 when it failed and the previous catalog is still served.",
		}),
		LastReloadSuccessTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful load of the --config file (or of the start without one).",
		}),
		Policies: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: metricsNamespace, Name: "config_policies",
			Help: "Metrics in the catalog in force, built-in and configured.",
		}),
	}
	for _, c := range []prometheus.Collector{m.LastReloadSuccessful, m.LastReloadSuccessTime, m.Policies} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Loader keeps the metric catalog in force: the built-in policies and those of
// the file at Path. It is safe for concurrent use.
type Loader struct {
	path    string
	builtin []policy.Policy
	clock   clock.WithTicker
	metrics *Metrics

	cur  atomic.Pointer[policy.Catalog]
	prom atomic.Pointer[Prometheus]

	mu   sync.Mutex
	hash [sha256.Size]byte
	// badHash is the content of the last file that failed to load, which is
	// not parsed again while it stays.
	badHash  [sha256.Size]byte
	lastErr  error
	failedAt time.Time
	onChange []func(*policy.Catalog)
}

// NewLoader returns a Loader serving builtin and, when path is not empty, the
// policies of that file, which it reads now. A file that cannot be read or is
// invalid is an error naming the path and every bad field: the adapter does not
// start on it.
func NewLoader(path string, builtin []policy.Policy, clk clock.WithTicker, metrics *Metrics) (*Loader, error) {
	l := &Loader{path: path, builtin: builtin, clock: clk, metrics: metrics}
	if path == "" {
		c, err := (*File)(nil).Catalog(builtin)
		if err != nil {
			return nil, err
		}
		l.set(c)
		return l, nil
	}
	if _, err := l.Reload(); err != nil {
		return nil, err
	}
	return l, nil
}

// Catalog returns the catalog in force.
func (l *Loader) Catalog() *policy.Catalog { return l.cur.Load() }

// Prometheus returns the prometheus section of the file in force (the zero
// value without one). It changes with the catalog: read it in an OnChange
// function.
func (l *Loader) Prometheus() Prometheus {
	if p := l.prom.Load(); p != nil {
		return *p
	}
	return Prometheus{}
}

// OnChange registers f to be called with each new catalog after a reload
// changed it (not for the first one).
func (l *Loader) OnChange(f func(*policy.Catalog)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onChange = append(l.onChange, f)
}

func (l *Loader) set(c *policy.Catalog) {
	l.cur.Store(c)
	l.metrics.LastReloadSuccessful.Set(1)
	l.metrics.LastReloadSuccessTime.Set(float64(l.clock.Now().Unix()))
	l.metrics.Policies.Set(float64(len(c.Names())))
	for _, w := range warnings(c) {
		klog.InfoS("Policy configuration warning", "path", l.path, "warning", w)
	}
}

func warnings(c *policy.Catalog) []string {
	var out []string
	for _, p := range c.Policies() {
		out = append(out, p.Warnings()...)
	}
	return out
}

// Reload reads the file and, when its content changed and is valid, makes its
// catalog the one in force. A bad file keeps the previous catalog; the error
// says what is wrong in at most MaxErrorBytes. A file larger than
// MaxFileBytes is refused unread. When the file in force is back (a bad
// edit reverted), the failure is cleared. changed reports a new catalog.
func (l *Loader) Reload() (changed bool, err error) {
	if l.path == "" {
		return false, nil
	}
	data, err := readBounded(l.path, MaxFileBytes)
	if err != nil {
		return false, l.failed(fmt.Errorf("reading --config=%s: %w", l.path, err))
	}
	sum := sha256.Sum256(data)
	l.mu.Lock()
	same := sum == l.hash && l.cur.Load() != nil
	stillBad := sum == l.badHash && l.lastErr != nil
	if same && l.lastErr != nil {
		// The file in force is the newest again: nothing failed any more.
		l.lastErr, l.failedAt = nil, time.Time{}
		l.metrics.LastReloadSuccessful.Set(1)
	}
	lastErr := l.lastErr
	l.mu.Unlock()
	if same {
		return false, nil
	}
	if stillBad {
		return false, lastErr
	}
	f, err := Parse(data)
	if err != nil {
		return false, l.failedContent(sum, fmt.Errorf("--config=%s: %w", l.path, err))
	}
	c, err := f.Catalog(l.builtin)
	if err != nil {
		return false, l.failedContent(sum, fmt.Errorf("--config=%s: %w", l.path, err))
	}
	first := l.cur.Load() == nil
	l.mu.Lock()
	l.hash, l.lastErr = sum, nil
	subs := slices.Clone(l.onChange)
	l.mu.Unlock()
	prom := Prometheus{}
	if f.Prometheus != nil {
		prom = *f.Prometheus
	}
	l.prom.Store(&prom)
	l.set(c)
	if !first {
		klog.InfoS("Policy configuration reloaded", "path", l.path, "metrics", c.Names())
		for _, f := range subs {
			f(c)
		}
	}
	return true, nil
}

// failed records a failed load, its error cut to MaxErrorBytes, and returns
// that error.
func (l *Loader) failed(err error) error {
	return l.failedContent([sha256.Size]byte{}, err)
}

// failedContent is failed for a file whose content (sum) does not load.
func (l *Loader) failedContent(sum [sha256.Size]byte, err error) error {
	err = boundedError{err}
	l.mu.Lock()
	l.lastErr, l.failedAt, l.badHash = err, l.clock.Now(), sum
	l.mu.Unlock()
	l.metrics.LastReloadSuccessful.Set(0)
	return err
}

// boundedError is an error whose text is cut to MaxErrorBytes (on a rune
// boundary, control characters replaced); errors.Is and As see the cause.
type boundedError struct{ err error }

func (e boundedError) Error() string { return excerpt.String(e.err.Error(), MaxErrorBytes) }
func (e boundedError) Unwrap() error { return e.err }

// ReadFile reads and parses the configuration file at path within the
// Loader's bounds: a file above MaxFileBytes is refused unread, and the error
// (naming every bad field) is cut to MaxErrorBytes.
func ReadFile(path string) (*File, error) {
	data, err := readBounded(path, MaxFileBytes)
	if err != nil {
		return nil, boundedError{err}
	}
	f, err := Parse(data)
	if err != nil {
		return nil, boundedError{err}
	}
	return f, nil
}

// errTooLarge: the file exceeds MaxFileBytes.
var errTooLarge = errors.New("file too large")

// readBounded reads the file at path, refusing one larger than max bytes
// without reading it (or, if it grows while read, past max+1 bytes).
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", errTooLarge, st.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, max)
	}
	return data, nil
}

// Status returns when the last load failed and its error, while no later load
// succeeded; a nil error when the file in force is the newest.
func (l *Loader) Status() (failedAt time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failedAt, l.lastErr
}

// Run checks the file every interval until ctx ends, logging each failed
// reload once per distinct error (the previous catalog stays in force).
func (l *Loader) Run(ctx context.Context, interval time.Duration) {
	if l.path == "" {
		return
	}
	t := l.clock.NewTicker(interval)
	defer t.Stop()
	var lastMsg string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if _, err := l.Reload(); err != nil {
			if msg := err.Error(); msg != lastMsg {
				klog.ErrorS(err, "Policy configuration not reloaded; serving the previous one", "path", l.path)
				lastMsg = msg
			}
			continue
		}
		lastMsg = ""
	}
}
