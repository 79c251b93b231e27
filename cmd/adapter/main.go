// Command adapter is saturation-adapter: a Kubernetes aggregated API server that
// serves LLM saturation metrics to HorizontalPodAutoscalers.
package main

import (
	"fmt"
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"github.com/saturation-adapter/saturation-adapter/cmd/adapter/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	cmd := app.NewCommand(ctx)
	// Errors go to stderr once, plainly: explain is used by people at a terminal.
	if err := cli.RunNoErrOutput(cmd); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
