package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
)

// Config is one run of the load test.
type Config struct {
	// Engines is the number of engines (pods), PoolSize the pods per pool
	// (each pool has one HPA; ten pools per namespace).
	Engines  int
	PoolSize int
	// Terms is "default" (the built-in policies: queue depth and KV-cache
	// usage, no histograms) or "every" (everyTermPolicy beside them: every term
	// kind, histograms read and every window kept, and the requests ask for it).
	Terms string
	// Dump is the /metrics body every engine serves.
	Dump string
	// Rate is the External metric requests per second during the measurement,
	// round-robin over the pools.
	Rate float64
	// Warmup is the least time between the first fresh answer of every pool and
	// the measurement; the run waits longer until the histories are full (see
	// historyFill) unless NoHistoryFill is set (the harness's own test).
	Warmup        time.Duration
	NoHistoryFill bool
	// Measure is the length of the measurement window.
	Measure time.Duration
	// Interval is the adapter's --scrape-interval.
	Interval time.Duration
	// ProfileDir, when set, receives the adapter's CPU profile over the
	// measurement window and its heap profiles at its start and end.
	ProfileDir string
	// LogDir, when set, keeps the children's logs; else a temporary directory
	// (removed) holds them.
	LogDir string
	// Exe is the executable started as the children; os.Executable when empty.
	Exe string
	// GoMemLimit, when set, is the adapter's GOMEMLIMIT, as the install sets
	// it (about 10 % under the container's memory limit).
	GoMemLimit string
	// Source is the adapter measured: sourceDirect (this adapter scraping),
	// sourcePrometheus (this adapter reading Prometheus) or
	// sourcePrometheusAdapter (prometheus-adapter reading Prometheus).
	Source string
	// PromInterval is Prometheus's scrape interval (Interval when 0);
	// Prometheus and PrometheusAdapter are the executables.
	PromInterval                  time.Duration
	Prometheus, PrometheusAdapter string
	// GroupSizes are the pool sizes whose maximum request rate is measured
	// after the window, for MaxRateFor each (none when 0), by MaxRateWorkers
	// requests at a time (closed loop): the namespace's first s pods, by
	// their g<s> label.
	GroupSizes     []int
	MaxRateFor     time.Duration
	MaxRateWorkers int
}

func defaultConfig() Config {
	return Config{
		PoolSize: 100,
		Terms:    "default",
		Dump:     filepath.Join("testdata", "samples", "vllm_v1-0.10-nvcr25.09_single-engine.prom"),
		Rate:     500,
		Measure:  30 * time.Second,
		Interval: 2 * time.Second,
		Source:   sourceDirect,

		Prometheus:        "prometheus",
		PrometheusAdapter: filepath.Join(".cache", "prometheus-adapter-"+prometheusAdapterVersion, "prometheus-adapter"),
		MaxRateWorkers:    8,
	}
}

// prometheusAdapterVersion is the prometheus-adapter make
// bench-vs-prometheus-adapter builds (hack/prometheus-adapter's go.mod).
const prometheusAdapterVersion = "v0.12.0"

// everyTermPolicy is a policy with every term kind, so the extractor reads the
// latency histograms and each History keeps its readings for the longest
// window (5 m, thinned to history.DefaultMaxReadings) with three window
// aggregates (1 m, 2 m, 5 m).
const everyTermPolicy = `apiVersion: saturation-adapter.io/v1alpha1
kind: PolicyConfig
policies:
- name: every-term
  kind: mean
  queueCap: 1024
  terms:
  - {kind: queueDepth, setPoint: 4, maxRatio: 10}
  - {kind: kvCacheUsage, setPoint: 0.8}
  - {kind: batchSlots, setPoint: 0.9, maxNumSeqs: 64}
  - {kind: preemptionRate, setPoint: 1, window: 2m}
  - {kind: ttft, slo: 1500ms, quantile: 0.95, window: 1m}
  - {kind: e2eLatency, slo: 60s, quantile: 0.9, window: 5m}
  - {kind: interTokenLatency, slo: 100ms, quantile: 0.95, window: 1m}
`

// Result is what one run measured.
type Result struct {
	Engines    int
	Terms      string
	GoMemLimit string
	// AdapterCPU is the adapter process's CPU time over the window, Window its
	// length.
	AdapterCPU, Window time.Duration
	// RSS is the adapter's largest resident set sampled during the window, Peak
	// its peak since start (VmHWM), HeapInuse the Go heap in use at the end.
	RSS, Peak, HeapInuse int64
	// Scrapes and ScrapeErrors are the adapter's scrapes in the window;
	// Skipped the scheduled scrapes it skipped.
	Scrapes, ScrapeErrors, Skipped float64
	// Requests sent, OK answered 200 with every pod counted, Stale answers
	// with an unknown pod or a reading older than MaxAge, Failed the rest.
	Requests, OK, Stale, Failed int
	// OldestAge is the age of the oldest reading behind any answer (its
	// timestamp has a resolution of 1 s), MaxAge the adapter's max sample age.
	OldestAge, MaxAge time.Duration
	// Latencies of the answered requests, sorted; Timeline the same in the
	// order sent, with their send times.
	Latencies []time.Duration
	Timeline  []Sample
	// DriverCPU and EngineCPU are the other processes of the test; MachineBusy
	// the CPU time of every process on the machine (those alive at the end),
	// all over the window.
	DriverCPU, EngineCPU, MachineBusy time.Duration
	// CPUs is the machine's CPU count, Load1 its one-minute load average at the
	// end of the window.
	CPUs  int
	Load1 float64
	// FirstError is an example of a failed or stale answer.
	FirstError string
	// Source is the adapter measured (Config.Source); PromCPU and PromRSS
	// Prometheus's CPU time over the window and largest resident set, when
	// the source uses it.
	Source       string
	PromCPU      time.Duration
	PromRSS      int64
	PromInterval time.Duration
	MaxRates     []PoolRate
	PoolSize     int
	// Reference is how long textparse took over the dump in the driver before
	// the run started its children: a gauge of the machine's speed at the
	// time (82-89 us on the quiet 2-core development VM), since run-to-run
	// differences on a shared machine can exceed the differences measured.
	Reference time.Duration
}

// PoolRate is the maximum request rate measured on a pool of Size pods:
// answers per second (200, one item), and the requests that failed.
type PoolRate struct {
	Size         int
	Rate         float64
	OK, Failures int
}

// Sample is one request: when it was sent and how long its answer took.
type Sample struct {
	Sent    time.Time
	Latency time.Duration
}

// Quantile returns the q-quantile of the latencies, 0 when none.
func (r *Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[min(len(r.Latencies)-1, int(q*float64(len(r.Latencies))))]
}

// Run starts the engines and the adapter, waits until every pool's answer is
// fresh and the histories are full, measures for c.Measure under the request
// load and stops the children.
func Run(ctx context.Context, c Config) (Result, error) {
	if c.Source == "" {
		c.Source = sourceDirect
	}
	if c.PromInterval == 0 {
		c.PromInterval = c.Interval
	}
	res := Result{Engines: c.Engines, Terms: c.Terms, MaxAge: 3 * c.Interval, GoMemLimit: c.GoMemLimit, Source: c.Source, PoolSize: c.PoolSize}
	if usesPrometheus(c.Source) {
		res.MaxAge, res.PromInterval = 3*c.PromInterval, c.PromInterval
	}
	if c.Engines > maxEngines {
		return res, fmt.Errorf("%d engines: at most %d", c.Engines, maxEngines)
	}
	switch c.Source {
	case sourceDirect, sourcePrometheus:
	case sourcePrometheusAdapter:
		if c.Terms != "default" {
			return res, fmt.Errorf("prometheus-adapter: terms %q: its rules compute the built-in llm_saturation only (terms default)", c.Terms)
		}
	default:
		return res, fmt.Errorf("source %q: want %s, %s or %s", c.Source, sourceDirect, sourcePrometheus, sourcePrometheusAdapter)
	}
	if c.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return res, err
		}
		c.Exe = exe
	}
	dump, err := filepath.Abs(c.Dump)
	if err != nil {
		return res, err
	}
	// Before any child starts: the machine's speed without this test's load.
	if res.Reference, err = reference(dump); err != nil {
		return res, fmt.Errorf("-dump: %w", err)
	}
	dir, err := os.MkdirTemp("", "benchscale-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	logDir := c.LogDir
	if logDir == "" {
		logDir = dir
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return res, err
	}
	tag := fmt.Sprintf("%d-%s-%s", c.Engines, c.Terms, c.Source)

	sp, cert, err := newSpec(c, dir)
	if err != nil {
		return res, err
	}
	engines, addrs, err := startEngines(c, logDir, tag, dump)
	defer stopAll(engines)
	if err != nil {
		return res, err
	}
	for i := 0; i < len(addrs); i += c.PoolSize {
		p := len(sp.Pools)
		sp.Pools = append(sp.Pools, pool{Namespace: fmt.Sprintf("llm-%02d", p/10), App: fmt.Sprintf("pool-%03d", p),
			Addrs: addrs[i:min(i+c.PoolSize, len(addrs))], First: (p % 10) * c.PoolSize})
	}
	var prom *prometheus
	if usesPrometheus(c.Source) {
		if prom, err = startPrometheus(ctx, c, sp.Pools, dir, logDir, tag); err != nil {
			return res, err
		}
		defer prom.stop()
		if err := prom.waitScraped(ctx, c.Engines); err != nil {
			return res, fmt.Errorf("%w (prometheus log: %s)", err, prom.log)
		}
	}
	var (
		pid    int
		logf   string
		d      *driver
		others []int
	)
	switch c.Source {
	case sourcePrometheusAdapter:
		kube, kubeURL, err := fakeKube()
		if err != nil {
			return res, err
		}
		defer kube.Close()
		pa, base, err := startPrometheusAdapter(c, sp, prom, kubeURL, logDir, tag)
		if err != nil {
			return res, err
		}
		defer pa.stop()
		sp.Metric = policy.MetricSaturation
		pid, logf, d = pa.pid(), pa.log, newDriver(base, c, sp, cert, res.MaxAge)
	default:
		if prom != nil {
			sp.PrometheusURL, sp.PromInterval = prom.url, c.PromInterval
		}
		adapter, line, err := startAdapter(c, sp, logDir, tag)
		if err != nil {
			return res, err
		}
		defer adapter.stop()
		pid, logf, d = adapter.cmd.Process.Pid, adapter.log, newDriver("https://"+strings.TrimSpace(line), c, sp, cert, res.MaxAge)
	}
	defer d.client.CloseIdleConnections()
	if err := d.warmUp(ctx); err != nil {
		return res, fmt.Errorf("%w (adapter log: %s)", err, logf)
	}
	for _, ch := range engines {
		others = append(others, ch.cmd.Process.Pid)
	}
	d.prom = prom
	if err := d.measure(ctx, pid, others, tag, &res); err != nil {
		return res, err
	}
	return res, d.maxRates(ctx, &res)
}

// newSpec returns the adapter's spec (its pools still empty) for the run's
// policy set, with its policy file and client CA written into dir, and the
// driver's client certificate.
func newSpec(c Config, dir string) (spec, tls.Certificate, error) {
	sp := spec{ClientCA: filepath.Join(dir, "client-ca.crt"), Dir: dir, Interval: c.Interval, Metric: policy.MetricSaturation, GroupSizes: c.GroupSizes}
	cert, err := newClientPKI(sp.ClientCA)
	if err != nil {
		return sp, cert, err
	}
	switch c.Terms {
	case "default":
	case "every":
		sp.Config, sp.Metric = filepath.Join(dir, "policies.yaml"), "every-term"
		if err := os.WriteFile(sp.Config, []byte(everyTermPolicy), 0o600); err != nil {
			return sp, cert, err
		}
	default:
		return sp, cert, fmt.Errorf("terms %q: want default or every", c.Terms)
	}
	return sp, cert, nil
}

// startEngines starts the engine processes, engineBatch engines each, and
// returns them (also on error: the caller stops them) and the engines'
// addresses.
func startEngines(c Config, logDir, tag, dump string) ([]*child, []string, error) {
	var children []*child
	var addrs []string
	for first := 0; first < c.Engines; first += engineBatch {
		n := min(engineBatch, c.Engines-first)
		ch, line, err := startChild(c.Exe, roleEngines, filepath.Join(logDir, fmt.Sprintf("engines-%s-%d.log", tag, first)), nil,
			"-first", strconv.Itoa(first), "-count", strconv.Itoa(n), "-dump", dump)
		if err != nil {
			return children, nil, err
		}
		children = append(children, ch)
		var got []string
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			return children, nil, fmt.Errorf("engines %d..%d: addresses from %q: %w", first, first+n-1, line, err)
		}
		if len(got) != n {
			return children, nil, fmt.Errorf("engines %d..%d: %d addresses from %q", first, first+n-1, len(got), line)
		}
		addrs = append(addrs, got...)
	}
	return children, addrs, nil
}

func stopAll(children []*child) {
	for _, ch := range children {
		ch.stop()
	}
}

// startAdapter writes the spec and starts the adapter; line is the address
// it serves on.
func startAdapter(c Config, sp spec, logDir, tag string) (adapter *child, line string, err error) {
	specFile := filepath.Join(sp.Dir, "spec.json")
	data, err := json.Marshal(sp)
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(specFile, data, 0o600); err != nil {
		return nil, "", err
	}
	var env []string
	if c.GoMemLimit != "" {
		env = append(env, "GOMEMLIMIT="+c.GoMemLimit)
	}
	return startChild(c.Exe, roleAdapter, filepath.Join(logDir, "adapter-"+tag+".log"), env, "-spec", specFile)
}

// newDriver returns a driver whose client reaches the adapter at base as the
// aggregator does.
func newDriver(base string, c Config, sp spec, cert tls.Certificate, maxAge time.Duration) *driver {
	return &driver{base: base, cfg: c, spec: sp, maxAge: maxAge, client: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			// The aggregator proxies over HTTP/2 to the APIService's backend,
			// authenticating with its front-proxy client certificate.
			TLSClientConfig: &tls.Config{
				InsecureSkipVerify: true, //nolint:gosec // the adapter's self-signed serving certificate on loopback
				Certificates:       []tls.Certificate{cert},
			},
			ForceAttemptHTTP2: true,
			// The maximum-rate workers each keep a connection.
			MaxIdleConnsPerHost: 64,
		},
	}}
}

// measure sends the load for the measurement window and fills in res what
// the adapter (pid), the engines, this driver and the machine did meanwhile;
// with Config.ProfileDir, it saves the adapter's profiles.
func (d *driver) measure(ctx context.Context, pid int, enginePIDs []int, tag string, res *Result) error {
	c := d.cfg
	before, err := d.scrapeStats(ctx)
	if err != nil && d.cfg.Source != sourcePrometheusAdapter { // its own metrics are not ours to require
		return err
	}
	cpu0, err := procCPU(pid)
	if err != nil {
		return err
	}
	var prom0 time.Duration
	stopPromRSS := func() {}
	if d.prom != nil {
		if prom0, err = procCPU(d.prom.pid()); err != nil {
			return err
		}
		stopPromRSS = sampleRSS(d.prom.pid(), &res.PromRSS)
	}
	eng0, self0, all0, t0 := sumCPU(enginePIDs), selfCPU(), processCPU(), time.Now()
	waitProfile, err := d.startProfile(ctx, tag)
	if err != nil {
		return err
	}
	stopRSS := sampleRSS(pid, &res.RSS)
	stopAges := d.sampleAges(ctx, res)
	d.load(ctx, res)
	stopAges()
	stopRSS()
	stopPromRSS()
	if d.prom != nil {
		prom1, err := procCPU(d.prom.pid())
		if err != nil {
			return err
		}
		res.PromCPU = prom1 - prom0
	}

	cpu1, err := procCPU(pid)
	if err != nil {
		return err
	}
	res.Window = time.Since(t0)
	res.AdapterCPU = cpu1 - cpu0
	res.EngineCPU = sumCPU(enginePIDs) - eng0
	res.DriverCPU = selfCPU() - self0
	res.MachineBusy = cpuSince(all0)
	res.Load1 = loadAvg()
	res.CPUs = numCPU()
	if _, res.Peak, err = procMem(pid); err != nil {
		return err
	}
	after, err := d.scrapeStats(ctx)
	if err != nil && d.cfg.Source != sourcePrometheusAdapter {
		return err
	}
	res.Scrapes = after.success - before.success
	res.ScrapeErrors = after.errors - before.errors
	res.Skipped = after.skipped - before.skipped
	res.HeapInuse = int64(after.heapInuse)
	if d.prom != nil { // Prometheus scraped, not the adapter
		if res.Scrapes, res.ScrapeErrors, err = d.prom.scrapes(ctx, res.Window); err != nil {
			return err
		}
	}
	if c.LogDir != "" {
		if err := writeTimeline(filepath.Join(c.LogDir, "latency-"+tag+".tsv"), res.Timeline); err != nil {
			return err
		}
	}
	if err := waitProfile(); err != nil {
		return err
	}
	if c.ProfileDir != "" {
		return d.saveProfile(ctx, "/debug/pprof/heap", filepath.Join(c.ProfileDir, "heap-"+tag+".pprof"))
	}
	return nil
}

// startProfile, with Config.ProfileDir, saves the adapter's heap profile and
// starts its CPU profile over the measurement window; wait waits for the
// latter and returns its error.
func (d *driver) startProfile(ctx context.Context, tag string) (wait func() error, err error) {
	if d.cfg.ProfileDir == "" {
		return func() error { return nil }, nil
	}
	// The heap at the start too: pprof -diff_base shows what the window allocated.
	if err := d.saveProfile(ctx, "/debug/pprof/heap", filepath.Join(d.cfg.ProfileDir, "heap-start-"+tag+".pprof")); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var profileErr error
	wg.Go(func() {
		profileErr = d.saveProfile(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.cfg.Measure.Seconds())),
			filepath.Join(d.cfg.ProfileDir, "cpu-"+tag+".pprof"))
	})
	return func() error { wg.Wait(); return profileErr }, nil
}

// sampleRSS keeps in *rss the largest resident set of process pid, sampled
// every 500 ms until stop is called (stop returns once sampling has ended).
func sampleRSS(pid int, rss *int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if r, _, err := procMem(pid); err == nil {
				*rss = max(*rss, r)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func sumCPU(pids []int) time.Duration {
	var t time.Duration
	for _, p := range pids {
		if c, err := procCPU(p); err == nil {
			t += c
		}
	}
	return t
}

// child is a process of this executable in a role.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   string
	done  chan struct{}
}

// startChild starts the executable in role with args and env added to this
// process's environment, its standard error to logFile, and returns the first
// line it writes to standard output.
func startChild(exe, role, logFile string, env []string, args ...string) (*child, string, error) {
	logf, err := os.Create(logFile)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(exe, args...)
	cmd.Env = append(append(os.Environ(), env...), roleEnv+"="+role)
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", role, err)
	}
	ch := &child{cmd: cmd, stdin: stdin, log: logFile, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<20)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r) // a test binary's PASS line
	}()
	go func() {
		_ = cmd.Wait()
		close(ch.done)
	}()
	select {
	case line := <-lines:
		if line == "" {
			<-ch.done
			return nil, "", fmt.Errorf("%s exited before it was ready (%v); its log: %s", role, cmd.ProcessState, logFile)
		}
		return ch, line, nil
	case <-time.After(5 * time.Minute):
		ch.stop()
		return nil, "", fmt.Errorf("%s not ready after 5 minutes; its log: %s", role, logFile)
	}
}

// stop closes the child's standard input, which ends it, and kills it by PID
// if it has not exited 30 s later.
func (c *child) stop() {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// driver sends the requests and reads the adapter's own metrics.
type driver struct {
	base   string
	client *http.Client
	cfg    Config
	spec   spec
	maxAge time.Duration
	// prom is the Prometheus the source reads, if any.
	prom *prometheus
}

func (d *driver) url(p pool) string {
	return d.base + "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + p.Namespace + "/" + d.spec.Metric +
		"?labelSelector=" + url.QueryEscape("app="+p.App)
}

// historyFill is how long the adapter must scrape before each History holds
// as many readings as it will keep: the readings of the longest window its
// policies read, at most history.DefaultMaxReadings.
func (d *driver) historyFill() time.Duration {
	window := history.DefaultStateWindow
	if d.cfg.Terms == "every" {
		window = 5 * time.Minute
	}
	n := min(history.DefaultMaxReadings, int(window/d.cfg.Interval)+1)
	return time.Duration(n+2) * d.cfg.Interval
}

// warmUp waits until the adapter is ready and answers every pool with every
// pod counted, then for Warmup and until the histories are full.
func (d *driver) warmUp(ctx context.Context) error {
	deadline := time.Now().Add(2*time.Minute + time.Duration(d.cfg.Engines)*10*time.Millisecond)
	for {
		if time.Now().After(deadline) {
			return errors.New("the adapter did not become ready")
		}
		resp, err := d.client.Get(d.base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	var last string
	for i := 0; i < len(d.spec.Pools); {
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s/%s never answered with every pod fresh: %s", d.spec.Pools[i].Namespace, d.spec.Pools[i].App, last)
		}
		if _, _, err := d.ask(ctx, d.spec.Pools[i]); err != nil {
			last = err.Error()
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		i++
	}
	if d.cfg.NoHistoryFill {
		return sleep(ctx, d.cfg.Warmup)
	}
	return sleep(ctx, max(d.cfg.Warmup, d.historyFill()))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errStale is an answer with an unknown pod or a reading older than the max age.
var errStale = errors.New("stale")

// ask requests one pool's value and checks it: every pod counted, none
// unknown, the oldest reading within the max age. It returns the latency and
// the oldest reading's age.
func (d *driver) ask(ctx context.Context, p pool) (time.Duration, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url(p), nil)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	latency := time.Since(start)
	if err != nil {
		return latency, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return latency, 0, fmt.Errorf("HTTP %d: %.1000s", resp.StatusCode, body)
	}
	var list v1beta1.ExternalMetricValueList
	if err := json.Unmarshal(body, &list); err != nil {
		return latency, 0, err
	}
	if len(list.Items) != 1 {
		return latency, 0, fmt.Errorf("%d items", len(list.Items))
	}
	it := list.Items[0]
	if d.cfg.Source == sourcePrometheusAdapter {
		// Its items carry the query's time and no pod count: its freshness
		// is sampled apart (sampleAges).
		return latency, 0, nil
	}
	age := time.Since(it.Timestamp.Time)
	if got := it.MetricLabels["pods"]; got != strconv.Itoa(len(p.Addrs)) || (it.MetricLabels["pods_unknown"] != "" && it.MetricLabels["pods_unknown"] != "0") || age > d.maxAge+time.Second {
		return latency, age, fmt.Errorf("%w: pool %s: labels %v, oldest reading %s old", errStale, p.App, it.MetricLabels, age.Round(time.Millisecond))
	}
	return latency, age, nil
}

// load sends Rate requests per second for Measure, round-robin over the
// pools, each at its time whatever the earlier ones' latency (open loop).
func (d *driver) load(ctx context.Context, res *Result) {
	every := time.Duration(float64(time.Second) / d.cfg.Rate)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= d.cfg.Measure || ctx.Err() != nil {
			break
		}
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		p := d.spec.Pools[i%len(d.spec.Pools)]
		wg.Go(func() {
			sent := time.Now()
			latency, age, err := d.ask(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			res.Requests++
			res.OldestAge = max(res.OldestAge, age)
			switch {
			case err == nil:
				res.OK++
			case errors.Is(err, errStale):
				res.Stale++
			default:
				res.Failed++
			}
			if err != nil && res.FirstError == "" {
				res.FirstError = err.Error()
			}
			if latency > 0 {
				res.Latencies = append(res.Latencies, latency)
				res.Timeline = append(res.Timeline, Sample{Sent: sent, Latency: latency})
			}
		})
	}
	wg.Wait()
	slices.Sort(res.Latencies)
	slices.SortFunc(res.Timeline, func(a, b Sample) int { return a.Sent.Compare(b.Sent) })
}

// sampleAges, for prometheus-adapter, asks for paAgeMetric of the pools in
// turn every 200 ms until stop is called and keeps the largest age in
// res.OldestAge: the age of the oldest sample behind its answers, as the
// timestamps of this adapter's answers give it.
func (d *driver) sampleAges(ctx context.Context, res *Result) (stop func()) {
	if d.cfg.Source != sourcePrometheusAdapter {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var oldest time.Duration
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			p := d.spec.Pools[i%len(d.spec.Pools)]
			if v, err := d.value(ctx, d.base+"/apis/external.metrics.k8s.io/v1beta1/namespaces/"+p.Namespace+"/"+paAgeMetric+
				"?labelSelector="+url.QueryEscape("app="+p.App)); err == nil {
				oldest = max(oldest, time.Duration(v*float64(time.Second)))
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		res.OldestAge = max(res.OldestAge, oldest)
	}
}

// value returns the value of an External metric answer's one item.
func (d *driver) value(ctx context.Context, u string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var list v1beta1.ExternalMetricValueList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || len(list.Items) != 1 {
		return 0, fmt.Errorf("HTTP %d, %d items", resp.StatusCode, len(list.Items))
	}
	return list.Items[0].Value.AsApproximateFloat64(), nil
}

// maxRates measures, for each of Config.GroupSizes, the answers per second
// to MaxRateWorkers requests at a time (each sent when the previous one of
// its worker is answered) for MaxRateFor, on the first namespace's first s
// pods (selector g<s>=0).
func (d *driver) maxRates(ctx context.Context, res *Result) error {
	if d.cfg.MaxRateFor <= 0 {
		return nil
	}
	inNS := 0
	for _, p := range d.spec.Pools {
		if p.Namespace == d.spec.Pools[0].Namespace {
			inNS += len(p.Addrs)
		}
	}
	for _, size := range d.cfg.GroupSizes {
		pr := PoolRate{Size: size}
		if size > inNS {
			return fmt.Errorf("max rate on %d pods: the namespace %s has %d", size, d.spec.Pools[0].Namespace, inNS)
		}
		u := d.base + "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + d.spec.Pools[0].Namespace + "/" + d.spec.Metric +
			"?labelSelector=" + url.QueryEscape(fmt.Sprintf("g%d=0", size))
		// One request first: a selector no HPA names is new to the adapter.
		_, _ = d.value(ctx, u)
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		start := time.Now()
		end := start.Add(d.cfg.MaxRateFor)
		for range d.cfg.MaxRateWorkers {
			wg.Go(func() {
				for time.Now().Before(end) && ctx.Err() == nil {
					_, err := d.value(ctx, u)
					mu.Lock()
					if err == nil {
						pr.OK++
					} else {
						pr.Failures++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		pr.Rate = float64(pr.OK) / time.Since(start).Seconds()
		res.MaxRates = append(res.MaxRates, pr)
	}
	return nil
}

// stats are the adapter's own counters.
type stats struct {
	success, errors, skipped, heapInuse float64
}

// scrapeStats reads the adapter's /metrics.
func (d *driver) scrapeStats(ctx context.Context) (stats, error) {
	var st stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/metrics", nil)
	if err != nil {
		return st, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return st, fmt.Errorf("/metrics: %w", err)
	}
	if f := fams["saturation_adapter_scrape_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "success" {
					st.success += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	if f := fams["saturation_adapter_scrape_errors_total"]; f != nil {
		for _, m := range f.GetMetric() {
			st.errors += m.GetCounter().GetValue()
		}
	}
	if f := fams["saturation_adapter_scrape_skipped_total"]; f != nil {
		for _, m := range f.GetMetric() {
			st.skipped += m.GetCounter().GetValue()
		}
	}
	if f := fams["go_memstats_heap_inuse_bytes"]; f != nil && len(f.GetMetric()) > 0 {
		st.heapInuse = f.GetMetric()[0].GetGauge().GetValue()
	}
	return st, nil
}

// saveProfile writes the adapter's pprof endpoint path to file.
func (d *driver) saveProfile(ctx context.Context, path, file string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+path, nil)
	if err != nil {
		return err
	}
	client := *d.client
	client.Timeout = d.cfg.Measure + time.Minute
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeTimeline writes one line per request: milliseconds since the first was
// sent, and its latency in milliseconds.
func writeTimeline(file string, samples []Sample) error {
	var b strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&b, "%.3f\t%.3f\n", float64(s.Sent.Sub(samples[0].Sent))/1e6, float64(s.Latency)/1e6)
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}

// reference returns the time textparse takes over the dump, the median of
// 200 runs.
func reference(dump string) (time.Duration, error) {
	body, err := os.ReadFile(dump)
	if err != nil {
		return 0, err
	}
	times := make([]time.Duration, 200)
	for i := range times {
		start := time.Now()
		p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
		for {
			if _, err := p.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					return 0, fmt.Errorf("textparse over %s: %w", dump, err)
				}
				break
			}
		}
		times[i] = time.Since(start)
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}
