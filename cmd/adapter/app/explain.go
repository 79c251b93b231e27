package app

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// ExplainPod is the explain output for one /metrics file (one pod).
type ExplainPod struct {
	Source          string                  `json:"source"`
	Dialect         string                  `json:"dialect"`
	Models          []string                `json:"models"`
	Metrics         map[string]string       `json:"metrics"`
	Engines         []signals.EngineSignals `json:"engines"`
	QueueDepth      *float64                `json:"queueDepth"`
	Running         *float64                `json:"running"`
	KVCacheUsage    *float64                `json:"kvCacheUsage"`
	KVCacheUsageMax *float64                `json:"kvCacheUsageMax"`
	Preemptions     *float64                `json:"preemptions"`
	Terms           []signals.Term          `json:"terms"`
	Saturation      *float64                `json:"saturation"`
	Invalid         map[signals.Reason]int  `json:"invalid"`
	Warnings        []string                `json:"warnings"`
}

// ExplainPool is what an HPA would see for the files as one pool of Ready pods:
// the values, or (when no pod has a saturation) the error the server would
// return, with null values.
type ExplainPool struct {
	Pods           int      `json:"pods"`
	Unknown        int      `json:"unknown"`
	Saturation     *float64 `json:"saturation"`
	DemandReplicas *float64 `json:"demandReplicas"`
	Error          string   `json:"error,omitempty"`
}

// Explanation is the whole explain output.
type Explanation struct {
	Pods []ExplainPod `json:"pods"`
	Pool ExplainPool  `json:"pool"`
}

func newExplainCommand() *cobra.Command {
	scoring := NewScoringOptions()
	cmd := &cobra.Command{
		Use:   "explain FILE...",
		Short: "Evaluate /metrics bodies offline, one file per pod, and print the saturation as JSON",
		Long: `explain reads each FILE as one pod's /metrics body (- reads standard input), extracts
the saturation signals as the server would, and prints JSON: one entry per file under
"pods" and, under "pool", what an HPA would be served for these pods as one pool.
It needs no cluster.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("explain needs at least one FILE (one pod's /metrics body each); use - to read standard input")
			}
			return nil
		},
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := scoring.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			ex, err := Explain(args, scoring, cmd.InOrStdin())
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(ex)
		},
	}
	scoring.AddFlags(cmd.Flags())
	return cmd
}

// Explain evaluates files as the server evaluates pods: each file is one Ready
// pod with a fresh reading, scored and pooled by the same catalog policies and
// signals.PoolBuilder the server uses. It fails on the first file that cannot
// be read or parsed, or that carries no supported engine metrics, naming the
// file.
func Explain(files []string, scoring ScoringOptions, stdin io.Reader) (Explanation, error) {
	catalog, err := scoring.Catalog()
	if err != nil {
		return Explanation{}, err
	}
	e := signals.NewExtractor()
	sat, demand := catalog.Lookup(signals.MetricSaturation), catalog.Lookup(signals.MetricDemandReplicas)
	satPool, demandPool := sat.NewPool(), demand.NewPool()
	var ex Explanation
	for _, f := range files {
		body, err := readFile(f, stdin)
		if err != nil {
			return Explanation{}, err
		}
		r, err := e.Extract(body)
		if err != nil {
			return Explanation{}, fmt.Errorf("%s: %w", f, err)
		}
		t := ExplainPod{
			Source: f, Dialect: r.Dialect, Models: r.Models, Metrics: r.Sources, Engines: r.Engines,
			QueueDepth: r.QueueDepth, Running: r.Running, KVCacheUsage: r.KVCacheUsage,
			KVCacheUsageMax: r.KVCacheUsageMax, Preemptions: r.Preemptions,
			Terms: signals.Score(&r, sat.SetPoints).Terms, Invalid: r.Invalid, Warnings: r.Warnings,
		}
		if v := satPool.Add(&r); v.Present {
			t.Saturation = &v.Value
		}
		demandPool.Add(&r)
		ex.Pods = append(ex.Pods, t)
	}
	p, d := satPool.Pool(), demandPool.Pool()
	ex.Pool = ExplainPool{Pods: p.Pods, Unknown: p.Pods - p.Known, Saturation: p.Value, DemandReplicas: d.Value}
	if p.Value == nil {
		ex.Pool.Error = "no pod has a queue depth or KV-cache usage: the server would answer 503 and the HPA would hold"
	}
	return ex, nil
}

func readFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading standard input: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return b, nil
}
