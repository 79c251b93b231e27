package soak

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	"k8s.io/metrics/pkg/apis/external_metrics/v1beta1"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// Config is one soak run.
type Config struct {
	// ToolsDir holds the control-plane binaries, BinDir bin/adapter; Prometheus is the
	// prometheus binary; Dir a working directory that exists.
	ToolsDir, BinDir, Prometheus, Dir string
	// Engines stand-ins, PoolSize per pool (one HPA each, ten pools per namespace);
	// PromPools of the pools (the first ones) are also read through Prometheus by a
	// second adapter.
	Engines, PoolSize, PromPools int
	// Duration of the run after the warm-up; its last QuietShare has no new fault, so
	// that the final samples show the adapter at rest.
	Duration   time.Duration
	QuietShare float64
	// Epoch is how long the stand-ins' values stay the same.
	Epoch time.Duration
	// CheckEvery is how often each pool is asked (an HPA's sync period); SampleEvery
	// how often the adapters' memory and goroutines are read.
	CheckEvery, SampleEvery time.Duration
	// FaultEvery is how often a share (FaultShare) of the engines starts a fault of
	// FaultFor (a random length up to it); ReloadEvery how often the policy file is
	// rewritten (every third time with a bad file, then the good one again).
	FaultEvery  time.Duration
	FaultShare  float64
	FaultFor    time.Duration
	ReloadEvery time.Duration
	// PromOutage is how long Prometheus is down, once, at a quarter of the run;
	// APIServerDown how long kube-apiserver is, once, at half of it.
	PromOutage, APIServerDown time.Duration
	// Seed makes the fault schedule repeatable.
	Seed uint64
	// Logf receives progress.
	Logf func(string, ...any)
}

// Hour is `make soak`'s configuration: 1,000 engines, 100 HPAs, an hour.
func Hour() Config {
	return Config{Engines: 1000, PoolSize: 10, PromPools: 10, Duration: time.Hour, QuietShare: 0.1, Epoch: 30 * time.Second,
		CheckEvery: 15 * time.Second, SampleEvery: 10 * time.Second, FaultEvery: 20 * time.Second, FaultShare: 0.03, FaultFor: time.Minute,
		ReloadEvery: 5 * time.Minute, PromOutage: time.Minute, APIServerDown: 15 * time.Second, Seed: 20}
}

// Short is TestSoak's: 100 engines, 10 HPAs, two minutes, every kind of fault.
func Short() Config {
	return Config{Engines: 100, PoolSize: 10, PromPools: 2, Duration: 2 * time.Minute, QuietShare: 0.2, Epoch: 20 * time.Second,
		CheckEvery: 5 * time.Second, SampleEvery: 5 * time.Second, FaultEvery: 5 * time.Second, FaultShare: 0.08, FaultFor: 20 * time.Second,
		ReloadEvery: 20 * time.Second, PromOutage: 15 * time.Second, APIServerDown: 5 * time.Second, Seed: 20}
}

// Sample is one reading of an adapter's process.
type Sample struct {
	At         time.Duration // since the run's start
	Adapter    string
	RSS        int64 // bytes (VmRSS)
	Goroutines int
}

// Report is what a run saw.
type Report struct {
	Engines, HPAs int
	Duration      time.Duration
	// Checks are answers compared with the truth, by adapter ("direct", "prometheus"):
	// pool values and per-pod values; Unavailable the 503s (the HPA holds: allowed);
	// Wrong the values outside what the truth allows (must be 0), WrongExamples the
	// first of them.
	PoolChecks, PodChecks, Unavailable, Wrong map[string]int
	WrongExamples                             []string
	// Faults counts the engine faults started, by mode, and the other events.
	Faults  map[string]int
	Samples []Sample
	// Errors are problems of the run itself (not the adapter's).
	Errors []string
}

// Run runs the soak and returns its report; the error is a setup failure.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if err := raiseFileLimit(uint64(4*c.Engines + 4096)); err != nil {
		return nil, err
	}
	truth := Truth{Start: time.Now(), Epoch: c.Epoch}
	fleet, err := StartFleet(c.Engines, c.PoolSize, truth)
	if err != nil {
		return nil, err
	}
	defer fleet.Stop()
	cluster, err := controlplane.Start(ctx, controlplane.Options{ToolsDir: c.ToolsDir, Dir: c.Dir, Logf: c.Logf})
	if err != nil {
		return nil, err
	}
	defer cluster.Stop()
	pools := (c.Engines + c.PoolSize - 1) / c.PoolSize
	if err := createObjects(ctx, cluster, fleet, pools, c.PoolSize); err != nil {
		return nil, err
	}
	config := filepath.Join(c.Dir, "policies.yaml")
	if err := os.WriteFile(config, []byte(policyFiles[0]), 0o600); err != nil {
		return nil, err
	}
	repo, err := stack.RepoRoot()
	if err != nil {
		return nil, err
	}
	direct, err := stack.StartAdapter(ctx, cluster, stack.AdapterOptions{Binary: filepath.Join(c.BinDir, "adapter"),
		ManifestsDir: filepath.Join(repo, "manifests", "base"), ExtraArgs: []string{"--config=" + config}})
	if err != nil {
		return nil, err
	}
	defer direct.Process.Stop(10 * time.Second)
	prom, err := startPrometheus(ctx, c, fleet, c.PromPools*c.PoolSize)
	if err != nil {
		return nil, err
	}
	defer func() { prom.stop() }()
	promAdapter, err := startPromAdapter(ctx, cluster, c, prom.url, config)
	if err != nil {
		return nil, err
	}
	defer promAdapter.Process.Stop(10 * time.Second)
	drv, err := newDriver(cluster, c, fleet)
	if err != nil {
		return nil, err
	}
	drv.adapters = []*target{
		{name: "direct", port: direct.Port, proc: direct.Process, pools: pools,
			w: Windows{Fresh: 6*time.Second + 3*time.Second, Dark: 6*time.Second + 16*time.Second + 6*time.Second, Hold: 5 * time.Minute, UnknownSaturation: 1}},
		{name: "prometheus", port: promAdapter.Port, proc: promAdapter.Process, pools: c.PromPools, prom: prom,
			w: Windows{Fresh: 15*time.Second + 2*time.Second + 5*time.Second, Dark: 15*time.Second + 2*time.Second + 20*time.Second, Hold: 5 * time.Minute, UnknownSaturation: 1}},
	}
	if err := drv.warmUp(ctx); err != nil {
		return nil, err
	}
	c.Logf("warm: %d engines, %d HPAs; soaking for %s", c.Engines, pools, c.Duration)
	rep := drv.soak(ctx, config)
	rep.Engines, rep.HPAs, rep.Duration = c.Engines, pools, c.Duration
	return rep, nil
}

// policyFiles are the policy configurations the run reloads in turn: two good ones and a
// bad one (an upper-case name), which the adapter refuses while serving the last good one.
var policyFiles = []string{
	"apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: soak-demand, kind: demand, terms: [{kind: queueDepth, setPoint: 4}, {kind: kvCacheUsage, setPoint: 0.8}]}\n",
	"apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: soak-demand, kind: demand, terms: [{kind: queueDepth, setPoint: 6}]}\n- {name: soak-mean, kind: mean, terms: [{kind: kvCacheUsage, setPoint: 0.7}]}\n",
	"apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- {name: Soak-Bad, kind: mean}\n",
}

// createObjects creates the namespaces, one Running and Ready pod per engine (labelled
// app=<pool>, its metrics port annotated, its IP loopback: there is no node; the status
// is written as a kubelet would) and one HPA per pool on llm_saturation.
func createObjects(ctx context.Context, c *controlplane.Cluster, f *Fleet, pools, poolSize int) error {
	for ns := 0; ns*10 < pools; ns++ {
		if err := c.CreateNamespace(ctx, NamespaceOf(ns*10)); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, e := range f.Engines {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := createPod(ctx, c, e, PoolName(e.Index/poolSize)); err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	for p := range pools {
		h := stack.HPA(PoolName(p), PoolName(p), "llm_saturation", map[string]string{"app": PoolName(p)}, autoscalingv2.ValueMetricType, "1", 1, int32(2*poolSize), 0)
		if _, err := c.Client.AutoscalingV2().HorizontalPodAutoscalers(NamespaceOf(p)).Create(ctx, h, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func createPod(ctx context.Context, c *controlplane.Cluster, e *Engine, app string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: e.Pod, Namespace: e.Namespace, Labels: map[string]string{"app": app},
			Annotations: map[string]string{"prometheus.io/port": strconv.Itoa(e.Port), "prometheus.io/scrape": "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "soak/stand-in"}}},
	}
	created, err := c.Client.CoreV1().Pods(e.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", PodIPs: []corev1.PodIP{{IP: "127.0.0.1"}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	_, err = c.Client.CoreV1().Pods(e.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// target is one adapter the driver asks and watches.
type target struct {
	name  string
	port  int
	proc  *controlplane.Process
	pools int // the first pools are the ones it serves
	w     Windows
	prom  *promRunner // the Prometheus it reads, if any
}

// driver asks the adapters as HPAs would, checks the answers, injects the faults and
// samples the processes.
type driver struct {
	c        Config
	cluster  *controlplane.Cluster
	fleet    *Fleet
	client   *http.Client
	adapters []*target
	start    time.Time

	mu  sync.Mutex
	rep *Report
}

// newDriver builds the driver's client: the aggregator's front-proxy client certificate
// and its user headers, so that each adapter answers the driver as it answers the
// aggregator (the user is in system:masters: no SubjectAccessReview per request).
func newDriver(c *controlplane.Cluster, cfg Config, f *Fleet) (*driver, error) {
	kp, err := c.FrontProxyCA.Client(filepath.Join(c.Dir, "pki"), "soak-driver", "front-proxy-client")
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}, //nolint:gosec // the adapters on loopback; their certificates are not what the soak checks
		MaxIdleConnsPerHost: 8,
	}}
	return &driver{c: cfg, cluster: c, fleet: f, client: client, rep: &Report{
		PoolChecks: map[string]int{}, PodChecks: map[string]int{}, Unavailable: map[string]int{}, Wrong: map[string]int{}, Faults: map[string]int{},
	}}, nil
}

// get asks one adapter for path and decodes a 200 answer into out; it returns the status.
func (d *driver) get(ctx context.Context, t *target, path string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(t.port)+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Remote-User", "soak-hpa")
	req.Header.Set("X-Remote-Group", "system:masters")
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == http.StatusOK && out != nil {
		return resp.StatusCode, json.Unmarshal(body, out)
	}
	if resp.StatusCode != http.StatusOK && out != nil {
		return resp.StatusCode, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, body)
	}
	return resp.StatusCode, nil
}

// warmUp waits until every pool of every adapter answers.
func (d *driver) warmUp(ctx context.Context) error {
	deadline := time.Now().Add(3*time.Minute + time.Duration(d.c.Engines)*50*time.Millisecond)
	for _, t := range d.adapters {
		for p := 0; p < t.pools; {
			var list v1beta1.ExternalMetricValueList
			_, err := d.get(ctx, t, externalPath(p), &list)
			if err == nil && len(list.Items) == 1 {
				p++
				continue
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s adapter: pool %s never answered: %w\n%s", t.name, PoolName(p), err, t.proc.Tail(3000))
			}
			if !waitCtx(ctx, 500*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

func externalPath(p int) string {
	return "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + NamespaceOf(p) + "/llm_saturation?labelSelector=" + url.QueryEscape("app="+PoolName(p))
}

func podsPath(p int) string {
	return "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + NamespaceOf(p) + "/pods/*/llm_saturation?labelSelector=" + url.QueryEscape("app="+PoolName(p))
}

// soak runs the loops for the configured duration and returns the report.
func (d *driver) soak(ctx context.Context, config string) *Report {
	ctx, cancel := context.WithTimeout(ctx, d.c.Duration)
	defer cancel()
	d.start = time.Now()
	var wg sync.WaitGroup
	for _, t := range d.adapters {
		wg.Go(func() { d.checkLoop(ctx, t) })
		wg.Go(func() { d.sampleLoop(ctx, t) })
	}
	wg.Go(func() { d.faultLoop(ctx) })
	wg.Go(func() { d.reloadLoop(ctx, config) })
	wg.Go(func() { d.outages(ctx) })
	wg.Wait()
	// The final samples, at rest.
	for _, t := range d.adapters {
		d.sample(context.Background(), t)
	}
	return d.rep
}

// checkLoop asks each of the adapter's pools every CheckEvery, staggered, and checks its
// pool value and its pods' values against the truth.
func (d *driver) checkLoop(ctx context.Context, t *target) {
	step := d.c.CheckEvery / time.Duration(max(1, t.pools))
	for i := 0; ; i++ {
		if !waitCtx(ctx, step) {
			return
		}
		p := i % t.pools
		d.checkPool(ctx, t, p)
		d.checkPods(ctx, t, p)
	}
}

func (d *driver) checkPool(ctx context.Context, t *target, p int) {
	var list v1beta1.ExternalMetricValueList
	code, err := d.get(ctx, t, externalPath(p), &list)
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return
	case code == http.StatusServiceUnavailable:
		d.rep.Unavailable[t.name]++
		return
	case err != nil || len(list.Items) != 1:
		d.wrong(t, fmt.Sprintf("pool %s: HTTP %d, %d items, %v", PoolName(p), code, len(list.Items), err))
		return
	}
	v := list.Items[0].Value.AsApproximateFloat64()
	// The pods the answer counted without fresh data or by their state (held ones are
	// among the unknown).
	extra := 0
	for _, l := range []string{"pods_unknown", "pods_wedged", "pods_frozen", "pods_sleeping"} {
		n, _ := strconv.Atoi(list.Items[0].MetricLabels[l])
		extra += n
	}
	lo, hi := d.fleet.PoolBounds(d.fleet.Pool(p, d.c.PoolSize), now, t.w, t.prom != nil && t.prom.darkSince(now.Add(-t.w.Dark)), extra)
	d.rep.PoolChecks[t.name]++
	if v < lo || v > hi {
		d.wrong(t, fmt.Sprintf("pool %s at %s: %g served, the truth allows [%g, %g] (labels %v)", PoolName(p),
			now.Sub(d.start).Round(time.Second), v, lo, hi, list.Items[0].MetricLabels))
	}
}

func (d *driver) checkPods(ctx context.Context, t *target, p int) {
	var list v1beta2.MetricValueList
	code, err := d.get(ctx, t, podsPath(p), &list)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return
	case code == http.StatusServiceUnavailable:
		d.rep.Unavailable[t.name]++
		return
	case err != nil:
		d.wrong(t, fmt.Sprintf("pods of %s: HTTP %d, %v", PoolName(p), code, err))
		return
	}
	engines := map[string]*Engine{}
	for _, e := range d.fleet.Pool(p, d.c.PoolSize) {
		engines[e.Pod] = e
	}
	for _, it := range list.Items {
		e := engines[it.DescribedObject.Name]
		if e == nil {
			d.wrong(t, fmt.Sprintf("pods of %s: a value for %q, not a pod of the pool", PoolName(p), it.DescribedObject.Name))
			continue
		}
		v := it.Value.AsApproximateFloat64()
		d.rep.PodChecks[t.name]++
		if !d.fleet.CheckPod(e, v, it.Timestamp.Time, t.w) {
			d.wrong(t, fmt.Sprintf("pod %s/%s at %s: %g served for a reading of %s, the truth allows %v (modes %v)", e.Namespace, e.Pod,
				time.Since(d.start).Round(time.Second), v, it.Timestamp.Format(time.RFC3339), d.fleet.podCandidates(e, it.Timestamp.Add(-3*time.Second), it.Timestamp.Add(time.Second)),
				e.modesDuring(it.Timestamp.Add(-3*time.Second), it.Timestamp.Add(time.Second))))
		}
	}
}

// wrong records a wrong answer; d.mu is held.
func (d *driver) wrong(t *target, what string) {
	d.rep.Wrong[t.name]++
	if len(d.rep.WrongExamples) < 20 {
		d.rep.WrongExamples = append(d.rep.WrongExamples, t.name+": "+what)
		d.c.Logf("WRONG %s: %s", t.name, what)
	}
}

// sampleLoop reads the adapter's resident memory and goroutines every SampleEvery.
func (d *driver) sampleLoop(ctx context.Context, t *target) {
	for {
		d.sample(ctx, t)
		if !waitCtx(ctx, d.c.SampleEvery) {
			return
		}
	}
}

func (d *driver) sample(ctx context.Context, t *target) {
	rss, err := processRSS(t.proc.PID())
	if err != nil {
		d.fail("%s: %v", t.name, err)
		return
	}
	g, err := d.goroutines(ctx, t)
	if err != nil {
		if ctx.Err() == nil {
			d.fail("%s: goroutines: %v", t.name, err)
		}
		return
	}
	d.mu.Lock()
	d.rep.Samples = append(d.rep.Samples, Sample{At: time.Since(d.start), Adapter: t.name, RSS: rss, Goroutines: g})
	d.mu.Unlock()
}

func (d *driver) fail(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.rep.Errors) < 50 {
		d.rep.Errors = append(d.rep.Errors, fmt.Sprintf(format, args...))
	}
}

// goroutines reads go_goroutines from the adapter's /metrics.
func (d *driver) goroutines(ctx context.Context, t *target) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(t.port)+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Remote-User", "soak-hpa")
	req.Header.Set("X-Remote-Group", "system:masters")
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no go_goroutines in /metrics (HTTP %d)", resp.StatusCode)
}

// faultLoop starts engine faults every FaultEvery, each on FaultShare of the engines for
// up to FaultFor, until the quiet share of the run, then ends them all. Engines read
// through Prometheus never serve huge bodies (Prometheus would keep 20,000 series each).
func (d *driver) faultLoop(ctx context.Context) {
	rng := rand.New(rand.NewPCG(d.c.Seed, 1))
	quietAt := d.start.Add(time.Duration(float64(d.c.Duration) * (1 - d.c.QuietShare)))
	promEngines := d.c.PromPools * d.c.PoolSize
	type ending struct {
		e  *Engine
		at time.Time
	}
	var ends []ending
	defer func() {
		for _, e := range d.fleet.Engines {
			_ = e.SetMode(ModeOK)
		}
	}()
	for {
		if !waitCtx(ctx, d.c.FaultEvery) {
			return
		}
		now := time.Now()
		kept := ends[:0]
		for _, en := range ends {
			if now.After(en.at) || now.After(quietAt) {
				if err := en.e.SetMode(ModeOK); err != nil {
					d.fail("%v", err)
				}
				continue
			}
			kept = append(kept, en)
		}
		ends = kept
		if now.After(quietAt) {
			continue
		}
		for range max(1, int(float64(len(d.fleet.Engines))*d.c.FaultShare)) {
			e := d.fleet.Engines[rng.IntN(len(d.fleet.Engines))]
			if e.Mode() != ModeOK {
				continue
			}
			m := Mode(1 + rng.IntN(int(ModeSlow)))
			if m == ModeHuge && e.Index < promEngines {
				m = ModeGarbage
			}
			if err := e.SetMode(m); err != nil {
				d.fail("%v", err)
				continue
			}
			d.mu.Lock()
			d.rep.Faults[m.String()]++
			d.mu.Unlock()
			ends = append(ends, ending{e: e, at: now.Add(time.Duration(1 + rng.Int64N(int64(d.c.FaultFor))))})
		}
	}
}

// reloadLoop rewrites the policy file every ReloadEvery: the next good file, and every
// third time a bad one first (the adapter keeps serving the last good one).
func (d *driver) reloadLoop(ctx context.Context, config string) {
	for i := 1; ; i++ {
		if !waitCtx(ctx, d.c.ReloadEvery) {
			return
		}
		file := policyFiles[i%2]
		if i%3 == 0 {
			file = policyFiles[2]
		}
		tmp := config + ".tmp"
		if err := os.WriteFile(tmp, []byte(file), 0o600); err != nil {
			d.fail("writing the policy file: %v", err)
			continue
		}
		if err := os.Rename(tmp, config); err != nil {
			d.fail("writing the policy file: %v", err)
			continue
		}
		d.mu.Lock()
		d.rep.Faults["config reload"]++
		d.mu.Unlock()
	}
}

// outages stops Prometheus at a quarter of the run and kube-apiserver at half of it.
func (d *driver) outages(ctx context.Context) {
	if !waitCtx(ctx, d.c.Duration/4) {
		return
	}
	for _, t := range d.adapters {
		if t.prom == nil {
			continue
		}
		d.c.Logf("Prometheus down for %s", d.c.PromOutage)
		t.prom.down()
		waitCtx(ctx, d.c.PromOutage)
		if err := t.prom.up(context.Background()); err != nil {
			d.fail("restarting Prometheus: %v", err)
		}
		d.mu.Lock()
		d.rep.Faults["prometheus outage"]++
		d.mu.Unlock()
	}
	if !waitCtx(ctx, time.Until(d.start.Add(d.c.Duration/2))) {
		return
	}
	d.c.Logf("kube-apiserver down for %s", d.c.APIServerDown)
	if err := d.cluster.RestartAPIServer(ctx, d.c.APIServerDown); err != nil && ctx.Err() == nil {
		d.fail("restarting kube-apiserver: %v", err)
	}
	d.mu.Lock()
	d.rep.Faults["kube-apiserver restart"]++
	d.mu.Unlock()
}

// processRSS returns a process's resident set size (VmRSS) in bytes.
func processRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// raiseFileLimit raises RLIMIT_NOFILE to want (the stand-ins' listeners and the
// adapters' connections to them; the children inherit it).
func raiseFileLimit(want uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= want {
		return nil
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", lim.Cur, err)
	}
	return nil
}
