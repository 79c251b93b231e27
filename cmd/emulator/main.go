// Command emulator serves an emulated vLLM V1 engine over HTTP: OpenAI-style
// completions, /health and vLLM's /metrics, with fault switches for tests. See
// pkg/emulator for the model and `emulator --help` for the flags.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/cli"

	"github.com/saturation-adapter/saturation-adapter/cmd/emulator/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(app.NewCommand(ctx))
	stop()
	os.Exit(code)
}
