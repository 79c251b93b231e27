package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/model"
)

// The adapters a run measures (Config.Source).
const (
	// sourceDirect: the adapter scrapes the engines itself.
	sourceDirect = "direct"
	// sourcePrometheus: Prometheus scrapes the engines and the adapter reads
	// their series from it (--source=prometheus).
	sourcePrometheus = "prometheus"
	// sourcePrometheusAdapter: Prometheus scrapes the engines and
	// prometheus-adapter (kubernetes-sigs/prometheus-adapter) serves the
	// External metric from them with the external rules of paRules.
	sourcePrometheusAdapter = "prometheus-adapter"
)

// usesPrometheus reports whether a run's source needs Prometheus.
func usesPrometheus(source string) bool { return source != sourceDirect }

// promConfig is Prometheus's configuration: every engine of the targets file
// at the run's interval (the scrape timeout is the interval, its maximum).
const promConfig = `global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
- job_name: engines
  file_sd_configs:
  - files: [%[2]q]
`

// paRules is prometheus-adapter's configuration: llm_saturation as the
// built-in policy computes it for a pool with every engine reporting (the
// mean over pods of the larger of queue depth ÷ 5 and KV-cache usage ÷ 0.8,
// policy.DefaultSetPoints), and llm_sample_age, the age in seconds of the
// pool's oldest sample at the query's time (time() - timestamp()), which is
// how the run measures its freshness: prometheus-adapter's External values
// carry the query's time, not the samples'.
const paRules = `externalRules:
- seriesQuery: 'vllm:num_requests_waiting{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
  name: {matches: "^vllm:num_requests_waiting$", as: "llm_saturation"}
  metricsQuery: 'avg(max by (pod) (label_replace(vllm:num_requests_waiting{<<.LabelMatchers>>} / 5, "term", "queue", "", "") or label_replace(vllm:kv_cache_usage_perc{<<.LabelMatchers>>} / 0.8, "term", "kv", "", "")))'
- seriesQuery: 'vllm:num_requests_waiting{namespace!="",pod!=""}'
  resources:
    overrides:
      namespace: {resource: namespace}
  name: {matches: "^vllm:num_requests_waiting$", as: "llm_sample_age"}
  metricsQuery: 'max(time() - timestamp(vllm:num_requests_waiting{<<.LabelMatchers>>}))'
`

// paAgeMetric is paRules' freshness metric.
const paAgeMetric = "llm_sample_age"

// fileTarget is one entry of a file_sd_configs file.
type fileTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// writeTargets writes the pools' engines as Prometheus file_sd targets with
// the labels a PodMonitor gives (namespace, pod) and the pods' own labels, as
// a PodMonitor's relabelling to pod labels would, so that prometheus-adapter's
// selectors match series.
func writeTargets(file string, pools []pool, groupSizes []int) error {
	var ts []fileTarget
	for _, p := range pools {
		for i, addr := range p.Addrs {
			name := podName(p, i)
			lbls := map[string]string{"namespace": p.Namespace, "pod": name, "app": p.App}
			for k, v := range groupLabels(p, i, groupSizes) {
				lbls[k] = v
			}
			ts = append(ts, fileTarget{Targets: []string{addr}, Labels: lbls})
		}
	}
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o600)
}

// proc is a process of another executable (Prometheus, prometheus-adapter),
// stopped by its PID.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc starts exe with args, its output to logFile.
func startProc(exe, logFile string, args ...string) (*proc, error) {
	logf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", exe, err)
	}
	p := &proc{cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and kills the process (by its PID) if it has not
// exited 30 s later.
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// freePort returns a loopback port free at the time of the call.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// prometheus is a Prometheus server scraping the run's engines.
type prometheus struct {
	*proc
	url string
}

// startPrometheus starts Prometheus (c.Prometheus) on loopback, scraping the
// pools' engines every c.PromInterval, its storage under dir, and waits
// until it is ready.
func startPrometheus(ctx context.Context, c Config, pools []pool, dir, logDir, tag string) (*prometheus, error) {
	pdir := filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(filepath.Join(pdir, "data"), 0o700); err != nil {
		return nil, err
	}
	targets, config := filepath.Join(pdir, "targets.json"), filepath.Join(pdir, "prometheus.yml")
	if err := writeTargets(targets, pools, c.GroupSizes); err != nil {
		return nil, err
	}
	if err := os.WriteFile(config, fmt.Appendf(nil, promConfig, model.Duration(c.PromInterval), targets), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := startProc(c.Prometheus, filepath.Join(logDir, "prometheus-"+tag+".log"),
		"--config.file="+config, "--storage.tsdb.path="+filepath.Join(pdir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--storage.tsdb.retention.time=1h")
	if err != nil {
		return nil, err
	}
	pr := &prometheus{proc: p, url: "http://127.0.0.1:" + strconv.Itoa(port)}
	err = poll(ctx, time.Minute, func() (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("prometheus exited; its log: %s", p.log)
		default:
		}
		resp, err := http.Get(pr.url + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return pr, nil
}

// query runs an instant PromQL query and returns the value of its one sample
// (0 for an empty answer).
func (p *prometheus) query(ctx context.Context, q string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result model.Vector `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", q, r.Error)
	}
	if len(r.Data.Result) == 0 {
		return 0, nil
	}
	return float64(r.Data.Result[0].Value), nil
}

// waitScraped waits until Prometheus holds a sample of every engine.
func (p *prometheus) waitScraped(ctx context.Context, engines int) error {
	var last float64
	err := poll(ctx, 3*time.Minute, func() (bool, error) {
		n, err := p.query(ctx, `count(vllm:num_requests_waiting)`)
		if err != nil {
			return false, nil
		}
		last = n
		return int(n) >= engines, nil
	})
	if err != nil {
		return fmt.Errorf("prometheus has the series of %g of %d engines: %w", last, engines, err)
	}
	return nil
}

// scrapes returns the scrapes Prometheus ran of the engines over the last
// window, and how many of them failed (up == 0).
func (p *prometheus) scrapes(ctx context.Context, window time.Duration) (ok, failed float64, err error) {
	w := model.Duration(window.Round(time.Second)).String()
	all, err := p.query(ctx, `sum(count_over_time(up{job="engines"}[`+w+`]))`)
	if err != nil {
		return 0, 0, err
	}
	up, err := p.query(ctx, `sum(sum_over_time(up{job="engines"}[`+w+`]))`)
	if err != nil {
		return 0, 0, err
	}
	return up, all - up, nil
}

// poll calls f every 200 ms until it is done, fails, ctx ends or timeout
// passes.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := f()
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// fakeKube serves what prometheus-adapter asks of the Kubernetes API: the
// core group's discovery (its RESTMapper maps the external rules' namespace
// resource). Requests are authorized without it (the driver's client
// certificate is in system:masters), so nothing else is asked.
func fakeKube() (*http.Server, string, error) {
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("/api", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
			"serverAddressByClientCIDRs": []map[string]string{{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}}})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{}})
	})
	mux.HandleFunc("/api/v1", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{"kind": "APIResourceList", "groupVersion": "v1", "resources": []map[string]any{
			{"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace", "verbs": []string{"get", "list", "watch"}},
			{"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": []string{"get", "list", "watch"}},
		}})
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]string{"major": "1", "minor": "30", "gitVersion": "v1.30.0"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "benchscale's stand-in API serves discovery only: "+r.URL.Path, http.StatusNotFound)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, "http://" + l.Addr().String(), nil
}

// startPrometheusAdapter starts prometheus-adapter (c.PrometheusAdapter)
// reading prom with paRules, serving HTTPS on loopback with a self-signed
// certificate, trusting the driver's client CA, its Kubernetes API the
// stand-in at kube. It returns the process and its base URL.
func startPrometheusAdapter(c Config, sp spec, prom *prometheus, kube, logDir, tag string) (*proc, string, error) {
	dir := filepath.Join(sp.Dir, "prometheus-adapter")
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return nil, "", err
	}
	rules, kubeconfig := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(rules, []byte(paRules), 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: '"+kube+"'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {}}]\n"), 0o600); err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p, err := startProc(c.PrometheusAdapter, filepath.Join(logDir, "prometheus-adapter-"+tag+".log"),
		"--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1", "--cert-dir="+filepath.Join(dir, "certs"),
		"--client-ca-file="+sp.ClientCA, "--authentication-skip-lookup",
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig, "--lister-kubeconfig="+kubeconfig,
		"--prometheus-url="+prom.url+"/", "--config="+rules, "--metrics-relist-interval=1m", "--v=1")
	if err != nil {
		return nil, "", err
	}
	return p, "https://127.0.0.1:" + strconv.Itoa(port), nil
}

// podName is the name of a pool's i-th pod, in the adapter's pods and
// Prometheus's targets alike.
func podName(p pool, i int) string { return fmt.Sprintf("%s-%05d", p.App, i) }

// groupLabels are a pod's labels that make pools of each size of sizes: for
// size s, label g<s> is the pod's index in its namespace divided by s, so
// g<s>=0 selects the namespace's first s pods.
func groupLabels(p pool, i int, sizes []int) map[string]string {
	out := map[string]string{}
	for _, s := range sizes {
		out["g"+strconv.Itoa(s)] = strconv.Itoa((p.First + i) / s)
	}
	return out
}

// sizesFlag parses a comma-separated list of pool sizes.
func sizesFlag(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
