// Command drain is saturation-adapter's preStop helper: it waits until the LLM
// engine in its container has nothing running or waiting, so that a scale-down
// never cuts off a generation. It is small on purpose: `drain install DIR` copies
// it into every engine pod.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/saturation-adapter/saturation-adapter/cmd/drain/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.NewCommand(app.BinaryName).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
