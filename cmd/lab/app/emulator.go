package app

// The emulator subcommand: its options, and the HTTP server around
// lab/emulator's engines.
//
// Endpoints:
//
//   - POST /v1/completions: OpenAI legacy completions (model, prompt, max_tokens
//     default 16, stream with server-sent events and stream_options.include_usage).
//     The prompt may be a string, a list of one string, or token ids; text is
//     estimated at ceil(characters / --chars-per-token) tokens (default 4, OpenAI's
//     rule of thumb for English). Extensions: "prompt_tokens" gives the prompt
//     length exactly; "output_tokens" makes the model stop (finish_reason "stop")
//     after that many tokens. A client that disconnects aborts its request
//     (finished_reason "abort"). Errors use vLLM's OpenAI error body.
//   - GET /v1/models, GET /health (200 while the process serves, even when frozen).
//   - GET /metrics: vLLM's metrics for every engine (emulator.Metrics) on a
//     registry of the server's own, text format 0.0.4.
//   - POST /admin/fault?mode=none|metrics-500|metrics-hang|metrics-malformed|freeze
//     and GET /admin/fault (unless --enable-admin=false); see emulatorserver.FaultMode.
//
// With --data-parallel-size N the process holds N engines, labelled engine="0"..
// "N-1"; a request goes to the engine with the lowest waiting×4 + running, as
// vLLM's data-parallel load balancer does.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/saturation-adapter/saturation-adapter/cmd/internal/help"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/utils/clock"

	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	emulatorserver "github.com/saturation-adapter/saturation-adapter/lab/emulator/server"
)

// Options are the emulator's command-line options. Engine shape flags are
// named after vLLM's engine arguments and default to [emulator.DefaultConfig].
type EmulatorOptions struct {
	// BindAddress is the IP address to listen on, e.g. 127.0.0.1 or 127.0.3.7.
	BindAddress string
	// Port is the TCP port; 0 picks a free one (logged at start).
	Port int

	// ModelName is the served model name (vLLM --served-model-name), the
	// model_name label.
	ModelName string
	// Engines is the number of data-parallel engines in the process (vLLM
	// --data-parallel-size), labelled engine="0".."N-1".
	Engines int
	// MetricNames is v1, v1-rename-window or v0; see emulator.MetricNames.
	MetricNames string
	// Engine is the shape of each engine.
	Engine emulator.Config
	// CharsPerToken is the prompt-length estimate for text prompts: tokens =
	// ceil(characters / CharsPerToken). Default 4, OpenAI's rule of thumb for
	// English text ("one token is roughly 4 characters").
	CharsPerToken int

	// Fault is the fault mode at start; see emulatorserver.FaultMode.
	Fault string
	// EnableAdmin serves POST /admin/fault to switch faults at run time.
	EnableAdmin bool
	// ShutdownTimeout bounds the graceful shutdown of the HTTP server.
	ShutdownTimeout time.Duration
}

// NewEmulatorOptions returns the default options: 127.0.0.1:8000 (vLLM's default port),
// one engine of emulator.DefaultConfig, vLLM V1 metric names.
func NewEmulatorOptions() *EmulatorOptions {
	return &EmulatorOptions{
		BindAddress:     "127.0.0.1",
		Port:            8000,
		ModelName:       "meta-llama/Llama-3.1-8B-Instruct",
		Engines:         1,
		MetricNames:     string(emulator.NamesV1),
		Engine:          emulator.DefaultConfig(),
		CharsPerToken:   4,
		Fault:           string(emulatorserver.FaultNone),
		EnableAdmin:     true,
		ShutdownTimeout: 5 * time.Second,
	}
}

// Flags returns the options' flags in named sections.
func (o *EmulatorOptions) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("serving")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "IP address to listen on (any loopback address 127.x.y.z works, so many emulators can share a host).")
	fs.IntVar(&o.Port, "port", o.Port, "TCP port to listen on; 0 picks a free port.")
	fs.StringVar(&o.ModelName, "served-model-name", o.ModelName, "Model name served and used as the model_name label.")
	fs.IntVar(&o.CharsPerToken, "chars-per-token", o.CharsPerToken, "Prompt tokens are estimated as ceil(characters / chars-per-token) unless a request gives prompt_tokens.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "Longest graceful shutdown of the HTTP server.")

	fs = fss.FlagSet("engine")
	fs.IntVar(&o.Engines, "data-parallel-size", o.Engines, "Number of data-parallel engines in the process (engine label \"0\"..\"N-1\"); requests go to the least loaded.")
	addEngineFlags(fs, &o.Engine)

	fs = fss.FlagSet("metrics")
	fs.StringVar(&o.MetricNames, "metric-names", o.MetricNames, "vLLM metric names to serve: v1 (kv_cache_usage_perc), v1-rename-window (also the deprecated gpu_cache_usage_perc and time_per_output_token_seconds, as vLLM 0.9.2-0.11) or v0 (gpu_cache_usage_perc, no engine label, one engine).")
	fs.StringVar(&o.MetricNames, "metrics-dialect", o.MetricNames, "Same as --metric-names.")
	_ = fs.MarkDeprecated("metrics-dialect", "use --metric-names")

	fs = fss.FlagSet("faults")
	fs.StringVar(&o.Fault, "fault", o.Fault, fmt.Sprintf("Fault mode at start, one of %v.", emulatorserver.FaultModes()))
	fs.BoolVar(&o.EnableAdmin, "enable-admin", o.EnableAdmin, "Serve POST /admin/fault?mode=... to switch the fault mode at run time.")
	return fss
}

// Complete fills in derived defaults. There are none yet; it exists so that the
// command follows Complete → Validate → Run.
func (o *EmulatorOptions) Complete() error { return nil }

// Validate reports every invalid option at once.
func (o *EmulatorOptions) Validate() error {
	var errs []error
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address", o.BindAddress))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d is out of range", o.Port))
	}
	if o.ModelName == "" {
		errs = append(errs, errors.New("--served-model-name must not be empty"))
	}
	if o.Engines < 1 {
		errs = append(errs, fmt.Errorf("--data-parallel-size must be >= 1, got %d", o.Engines))
	}
	if o.CharsPerToken < 1 {
		errs = append(errs, fmt.Errorf("--chars-per-token must be >= 1, got %d", o.CharsPerToken))
	}
	d, err := emulator.ParseMetricNames(o.MetricNames)
	if err != nil {
		errs = append(errs, fmt.Errorf("--metric-names: %w", err))
	} else if d == emulator.NamesV0 && o.Engines > 1 {
		errs = append(errs, errors.New("--metric-names v0 has no engine label: it allows --data-parallel-size 1 only"))
	}
	if _, err := emulatorserver.ParseFaultMode(o.Fault); err != nil {
		errs = append(errs, fmt.Errorf("--fault: %w", err))
	}
	if err := o.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout must be >= 0, got %v", o.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

// Config returns the server configuration of validated options.
func (o *EmulatorOptions) Config() (emulatorserver.Config, error) {
	d, err := emulator.ParseMetricNames(o.MetricNames)
	if err != nil {
		return emulatorserver.Config{}, err
	}
	f, err := emulatorserver.ParseFaultMode(o.Fault)
	if err != nil {
		return emulatorserver.Config{}, err
	}
	return emulatorserver.Config{
		Engine:          o.Engine,
		Engines:         o.Engines,
		ModelName:       o.ModelName,
		MetricNames:     d,
		CharsPerToken:   o.CharsPerToken,
		Fault:           f,
		EnableAdmin:     o.EnableAdmin,
		ShutdownTimeout: o.ShutdownTimeout,
		Clock:           clock.RealClock{},
	}, nil
}

// Run listens on the bind address and port and serves until ctx is done.
func (o *EmulatorOptions) Run(ctx context.Context) error {
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	srv, err := emulatorserver.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	return srv.Serve(ctx, ln)
}

// NewEmulatorCommand returns the emulator command; it runs until ctx is done.
func NewEmulatorCommand(ctx context.Context) *cobra.Command {
	o := NewEmulatorOptions()
	cmd := &cobra.Command{
		Use:   "emulator",
		Short: "Emulate a vLLM V1 server under load: completions, /health, vLLM /metrics, fault switches",
		Long: `emulator serves one or more emulated continuous-batching LLM engines that schedule
like vLLM V1 (FCFS admission, chunked prefill, paged KV cache, preemption) in real
time, with vLLM's metric names on /metrics. The model is lab/emulator.`,
		Example: `  # One engine on vLLM's default port, with vLLM V1's metric names
  lab emulator

  # Two data-parallel engines on a loopback alias, a small KV cache, frozen from the start
  lab emulator --bind-address 127.0.3.7 --port 8001 --data-parallel-size 2 --num-gpu-blocks 512 --fault freeze

  # Switch a running emulator's /metrics to 500s, then back
  curl -X POST 'http://127.0.0.1:8000/admin/fault?mode=metrics-500'
  curl -X POST 'http://127.0.0.1:8000/admin/fault?mode=none'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(ctx)
		},
	}
	help.Set(cmd, o.Flags())
	return cmd
}
