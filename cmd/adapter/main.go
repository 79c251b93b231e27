// Command adapter is saturation-adapter: a Kubernetes aggregated API server that
// serves LLM saturation metrics to HorizontalPodAutoscalers.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/saturation-adapter/saturation-adapter/cmd/adapter/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	cmd := app.NewCommand(ctx)
	os.Exit(cli.Run(cmd))
}
