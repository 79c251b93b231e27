// Command lab is saturation-adapter's lab tool: it compares autoscaling policies
// on a request trace (simulate), measures one engine's saturation point
// (calibrate) and serves emulated vLLM engines (emulator). Nothing in it runs in
// a cluster; the adapter binary serves HPAs.
package main

import (
	"fmt"
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"

	"github.com/saturation-adapter/saturation-adapter/cmd/lab/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	if err := cli.RunNoErrOutput(app.NewCommand(ctx)); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
