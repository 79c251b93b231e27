package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/saturation-adapter/saturation-adapter/test/e2e/controlplane"
	"github.com/saturation-adapter/saturation-adapter/test/e2e/stack"
)

// promScrapeInterval is how often the soak's Prometheus scrapes its engines.
const promScrapeInterval = 5 * time.Second

// promRunner is a real Prometheus (Debian's, on loopback) scraping the first engines of
// the fleet, their series labelled namespace and pod as a PodMonitor labels them.
type promRunner struct {
	bin, dir, url string
	port          int

	mu       sync.Mutex
	proc     *controlplane.Process
	restarts int
	// outages are the [start, end] of each time it was down (end zero while down).
	outages [][2]time.Time
}

func startPrometheus(ctx context.Context, c Config, f *Fleet, n int) (*promRunner, error) {
	p := &promRunner{bin: c.Prometheus, dir: filepath.Join(c.Dir, "prometheus")}
	if err := os.MkdirAll(filepath.Join(p.dir, "data"), 0o700); err != nil {
		return nil, err
	}
	type target struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var targets []target
	for _, e := range f.Engines[:min(n, len(f.Engines))] {
		targets = append(targets, target{Targets: []string{"127.0.0.1:" + strconv.Itoa(e.Port)}, Labels: map[string]string{"namespace": e.Namespace, "pod": e.Pod}})
	}
	b, err := json.Marshal(targets)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(p.dir, "targets.json"), b, 0o600); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("global:\n  scrape_interval: %[1]s\n  scrape_timeout: 2s\nscrape_configs:\n- job_name: engines\n  file_sd_configs:\n  - files: [%[2]q]\n",
		promScrapeInterval, filepath.Join(p.dir, "targets.json"))
	if err := os.WriteFile(filepath.Join(p.dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if p.port, err = controlplane.FreePort(); err != nil {
		return nil, err
	}
	p.url = "http://127.0.0.1:" + strconv.Itoa(p.port)
	return p, p.start(ctx)
}

func (p *promRunner) start(ctx context.Context) error {
	args := []string{"--config.file=" + filepath.Join(p.dir, "prometheus.yml"), "--storage.tsdb.path=" + filepath.Join(p.dir, "data"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(p.port), "--storage.tsdb.retention.time=2h"}
	p.mu.Lock()
	proc, err := controlplane.StartProcess(p.dir, fmt.Sprintf("prometheus-%d", p.restarts), p.bin, args, nil)
	p.restarts++
	p.proc = proc
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, werr := proc.Exited(); exited {
			return false, fmt.Errorf("prometheus exited: %w\n%s", werr, proc.Tail(3000))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/-/ready", nil)
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
}

// down stops Prometheus (an outage); up starts it again on the same storage.
func (p *promRunner) down() {
	p.mu.Lock()
	p.outages = append(p.outages, [2]time.Time{time.Now()})
	proc := p.proc
	p.mu.Unlock()
	proc.Stop(10 * time.Second)
}

func (p *promRunner) up(ctx context.Context) error {
	err := p.start(ctx)
	p.mu.Lock()
	p.outages[len(p.outages)-1][1] = time.Now()
	p.mu.Unlock()
	return err
}

func (p *promRunner) stop() {
	p.mu.Lock()
	proc := p.proc
	p.mu.Unlock()
	if proc != nil {
		proc.Stop(10 * time.Second)
	}
}

// darkSince reports whether Prometheus was down at any time since t.
func (p *promRunner) darkSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.outages {
		if o[1].IsZero() || o[1].After(t) {
			return true
		}
	}
	return false
}

// startPromAdapter starts a second adapter process reading the first pools through
// Prometheus (--source=prometheus, its namespace only), as the adapter's ServiceAccount,
// on a self-signed certificate (the driver asks it directly; the APIService is the
// direct adapter's).
func startPromAdapter(ctx context.Context, c *controlplane.Cluster, cfg Config, promURL, config string) (*stack.Adapter, error) {
	kubeconfig, err := c.ServiceAccountKubeconfig(ctx, stack.AdapterNamespace, stack.AdapterServiceAccount)
	if err != nil {
		return nil, err
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return nil, err
	}
	var namespaces []string
	for p := 0; p < cfg.PromPools; p += 10 {
		namespaces = append(namespaces, NamespaceOf(p))
	}
	args := []string{
		"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--cert-dir=" + filepath.Join(cfg.Dir, "prom-adapter-certs"),
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--source=prometheus", "--prometheus-url=" + promURL, "--prometheus-scrape-interval=" + promScrapeInterval.String(),
		"--config=" + config,
	}
	for _, ns := range namespaces {
		args = append(args, "--namespaces="+ns)
	}
	proc, err := controlplane.StartProcess(cfg.Dir, "prom-adapter", filepath.Join(cfg.BinDir, "adapter"), args, nil)
	if err != nil {
		return nil, err
	}
	return &stack.Adapter{Process: proc, Port: port}, nil
}
