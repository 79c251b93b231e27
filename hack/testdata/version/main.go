// Command version prints what a binary built with the Makefile's version ldflags
// reports: k8s.io/component-base/version.Get() and the binary version the generic API
// server derives from it (k8s.io/apiserver's compatibility.DefaultBuildEffectiveVersion,
// which custom-metrics-apiserver calls and which panics on a gitVersion it cannot parse). hack/version_test.go builds and runs it.
package main

import (
	"encoding/json"
	"os"

	"k8s.io/apiserver/pkg/util/compatibility"
	"k8s.io/component-base/version"
)

func main() {
	ev := compatibility.DefaultBuildEffectiveVersion()
	out := struct {
		Info             any      `json:"info"`
		BinaryVersion    string   `json:"binaryVersion"`
		EmulationVersion string   `json:"emulationVersion"`
		Validate         []string `json:"validate"`
	}{Info: version.Get(), BinaryVersion: ev.BinaryVersion().String(), EmulationVersion: ev.EmulationVersion().String()}
	for _, err := range ev.Validate() {
		out.Validate = append(out.Validate, err.Error())
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
