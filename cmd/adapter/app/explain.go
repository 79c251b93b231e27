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

// ExplainTarget is the explain output for one /metrics file (one pod).
type ExplainTarget struct {
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
	Targets []ExplainTarget `json:"targets"`
	Pool    ExplainPool     `json:"pool"`
}

func newExplainCommand() *cobra.Command {
	fusion := FusionOptions{}
	d := signals.DefaultTargets()
	fusion.QueueDepthTarget, fusion.KVCacheUsageTarget, fusion.UnknownSaturation = d.QueueDepth, d.KVCacheUsage, 1
	cmd := &cobra.Command{
		Use:   "explain FILE...",
		Short: "Evaluate /metrics bodies offline, one file per pod, and print the saturation as JSON",
		Long: `explain reads each FILE as one pod's /metrics body (- reads standard input), extracts
the saturation signals as the server would, and prints JSON: one entry per file under
"targets" and, under "pool", what an HPA would be served for these pods as one pool.
It needs no cluster.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("explain needs at least one FILE (one pod's /metrics body each); use - to read standard input")
			}
			return nil
		},
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if errs := fusion.Validate(); len(errs) > 0 {
				return utilerrors.NewAggregate(errs)
			}
			ex, err := Explain(args, fusion, cmd.InOrStdin())
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(ex)
		},
	}
	fusion.AddFlags(cmd.Flags())
	return cmd
}

// Explain evaluates files as the server evaluates pods. It fails on the first
// file that cannot be read or parsed, or that carries no supported engine
// metrics, naming the file.
func Explain(files []string, fusion FusionOptions, stdin io.Reader) (Explanation, error) {
	e := signals.NewExtractor()
	targets := fusion.Targets()
	var ex Explanation
	members := make([]signals.Member, 0, len(files))
	for _, f := range files {
		body, err := readFile(f, stdin)
		if err != nil {
			return Explanation{}, err
		}
		r, err := e.Extract(body)
		if err != nil {
			return Explanation{}, fmt.Errorf("%s: %w", f, err)
		}
		fu := signals.Fuse(&r, targets)
		ex.Targets = append(ex.Targets, ExplainTarget{
			Source: f, Dialect: r.Dialect, Models: r.Models, Metrics: r.Sources, Engines: r.Engines,
			QueueDepth: r.QueueDepth, Running: r.Running, KVCacheUsage: r.KVCacheUsage,
			KVCacheUsageMax: r.KVCacheUsageMax, Preemptions: r.Preemptions,
			Terms: fu.Terms, Saturation: fu.Saturation, Invalid: r.Invalid, Warnings: r.Warnings,
		})
		members = append(members, signals.Member{Reading: &r, Fusion: fu})
	}
	p := signals.Aggregate(members, fusion.UnknownSaturation)
	ex.Pool = ExplainPool{Pods: p.Pods, Unknown: p.Pods - p.Known}
	if p.Known == 0 {
		ex.Pool.Error = "no pod has a queue depth or KV-cache usage: the server would answer 503 and the HPA would hold"
	} else {
		ex.Pool.Saturation, ex.Pool.DemandReplicas = &p.Saturation, &p.DemandReplicas
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
