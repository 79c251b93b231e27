package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
)

// PrometheusOptions configure the real Prometheus of a stack: the adapter then
// runs with --source=prometheus against it.
type PrometheusOptions struct {
	// Binary is the prometheus executable (PrometheusBinary finds it).
	Binary string
	// ScrapeInterval is how often it scrapes the engines; default 1s.
	ScrapeInterval time.Duration
	// CachePeriod is the adapter's --prometheus-cache-period; default 1s.
	CachePeriod time.Duration
	// Target, when set, maps a pod and the address it is scraped at to the
	// address Prometheus scrapes instead (a test's recording proxy); the series
	// keep the pod's namespace and pod labels.
	Target func(pod *corev1.Pod, addr string) string
}

// Prometheus is a running Prometheus on loopback scraping the engine pods of
// one namespace, their series labelled namespace and pod as
// kube-prometheus-stack's PodMonitors label them. Debian's prometheus package
// is built without Kubernetes service discovery, so the stack plays that part:
// it writes the Ready and not-yet-Ready Running pods that ask to be scraped
// (prometheus.io/scrape, prometheus.io/port) into a file_sd_configs file, which
// Prometheus watches.
type Prometheus struct {
	Process *controlplane.Process
	// URL is its HTTP API's base URL.
	URL string

	o       PrometheusOptions
	dir     string
	config  string
	targets string
	port    int
	restart int
	written []byte
}

// PrometheusBinary returns the prometheus executable: E2E_PROMETHEUS, else
// prometheus on PATH (the Debian package, which .ci/run installs).
func PrometheusBinary() (string, error) {
	if p := os.Getenv("E2E_PROMETHEUS"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		return "", errors.New("no prometheus binary: set E2E_PROMETHEUS or put prometheus on PATH (apt-get install prometheus, as .ci/run does)")
	}
	return p, nil
}

// prometheusConfig is the scrape configuration: the targets of the file the
// stack keeps (see Prometheus).
const prometheusConfig = `global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
- job_name: engines
  file_sd_configs:
  - files: [%[2]q]
    refresh_interval: 1s
`

// StartPrometheus starts Prometheus scraping namespace's engine pods, with
// its storage in a temporary directory under c.Dir, and waits until it is
// ready.
func StartPrometheus(ctx context.Context, c *controlplane.Cluster, o PrometheusOptions) (*Prometheus, error) {
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = time.Second
	}
	if o.CachePeriod == 0 {
		o.CachePeriod = time.Second
	}
	p := &Prometheus{o: o, dir: filepath.Join(c.Dir, "prometheus")}
	if err := os.MkdirAll(filepath.Join(p.dir, "data"), 0o700); err != nil {
		return nil, err
	}
	p.config, p.targets = filepath.Join(p.dir, "prometheus.yml"), filepath.Join(p.dir, "targets.json")
	if err := p.writeTargets(nil); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.config, []byte(fmt.Sprintf(prometheusConfig, o.ScrapeInterval, p.targets)), 0o600); err != nil {
		return nil, err
	}
	var err error
	if p.port, err = controlplane.FreePort(); err != nil {
		return nil, err
	}
	p.URL = "http://127.0.0.1:" + strconv.Itoa(p.port)
	return p, p.start(ctx)
}

func (p *Prometheus) start(ctx context.Context) error {
	args := []string{
		"--config.file=" + p.config,
		"--storage.tsdb.path=" + filepath.Join(p.dir, "data"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(p.port),
		"--storage.tsdb.retention.time=1h",
	}
	proc, err := controlplane.StartProcess(p.dir, fmt.Sprintf("prometheus-%d", p.restart), p.o.Binary, args, nil)
	if err != nil {
		return err
	}
	p.Process = proc
	p.restart++
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if exited, werr := proc.Exited(); exited {
			return false, fmt.Errorf("prometheus exited: %w\n%s", werr, proc.Tail(4000))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/-/ready", nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		proc.Stop(5 * time.Second)
		return fmt.Errorf("prometheus not ready: %w\n%s", err, proc.Tail(4000))
	}
	return nil
}

// fileTarget is one entry of a file_sd_configs file.
type fileTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// writeTargets writes the scrape targets of pods, when they changed: every
// Running pod with an IP whose prometheus.io/scrape is "true", at its
// prometheus.io/port, labelled with its namespace and name.
func (p *Prometheus) writeTargets(pods []*corev1.Pod) error {
	out := []fileTarget{}
	for _, pod := range pods {
		port := pod.Annotations["prometheus.io/port"]
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.Annotations["prometheus.io/scrape"] != "true" || port == "" {
			continue
		}
		addr := net.JoinHostPort(pod.Status.PodIP, port)
		if p.o.Target != nil {
			addr = p.o.Target(pod, addr)
		}
		out = append(out, fileTarget{Targets: []string{addr},
			Labels: map[string]string{"namespace": pod.Namespace, "pod": pod.Name}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Targets[0] < out[j].Targets[0] })
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	if bytes.Equal(b, p.written) {
		return nil
	}
	tmp := p.targets + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, p.targets); err != nil {
		return err
	}
	p.written = b
	return nil
}

// discover keeps the targets file in step with the pods of list until ctx
// ends.
func (p *Prometheus) discover(ctx context.Context, list func() []*corev1.Pod, logf func(string, ...any)) {
	for {
		if err := p.writeTargets(list()); err != nil {
			logf("writing Prometheus's targets: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops Prometheus (its process group, by PID).
func (p *Prometheus) Stop() { p.Process.Stop(10 * time.Second) }

// Restart starts Prometheus again on the same port and storage after Stop.
func (p *Prometheus) Restart(ctx context.Context) error { return p.start(ctx) }

// AdapterArgs are the adapter's flags for this Prometheus.
func (p *Prometheus) AdapterArgs() []string {
	return []string{"--source=prometheus", "--prometheus-url=" + p.URL,
		"--prometheus-scrape-interval=" + p.o.ScrapeInterval.String(), "--prometheus-cache-period=" + p.o.CachePeriod.String()}
}

// Logs returns the tail of its log.
func (p *Prometheus) Logs(n int64) string {
	if p == nil || p.Process == nil {
		return ""
	}
	return fmt.Sprintf("----- prometheus (%s) -----\n%s\n", p.Process.LogFile, p.Process.Tail(n))
}
