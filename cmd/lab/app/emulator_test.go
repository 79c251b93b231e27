package app

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
	"github.com/saturation-adapter/saturation-adapter/internal/testfixture/emulated"
)

func TestEmulatorOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*EmulatorOptions)
		wantErr string
	}{
		{"defaults", func(*EmulatorOptions) {}, ""},
		{"loopback alias", func(o *EmulatorOptions) { o.BindAddress = "127.0.3.7"; o.Port = 0 }, ""},
		{"bad address", func(o *EmulatorOptions) { o.BindAddress = "localhost" }, "--bind-address"},
		{"bad port", func(o *EmulatorOptions) { o.Port = 70000 }, "--port"},
		{"no engines", func(o *EmulatorOptions) { o.Engines = 0 }, "--data-parallel-size"},
		{"bad metric names", func(o *EmulatorOptions) { o.MetricNames = "v9" }, "--metric-names"},
		{"v0 with two engines", func(o *EmulatorOptions) { o.MetricNames = "v0"; o.Engines = 2 }, "v0"},
		{"bad fault", func(o *EmulatorOptions) { o.Fault = "explode" }, "--fault"},
		{"bad engine", func(o *EmulatorOptions) { o.Engine.BlockSize = 0 }, "block-size"},
		{"bad chars per token", func(o *EmulatorOptions) { o.CharsPerToken = 0 }, "--chars-per-token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewEmulatorOptions()
			tt.mutate(o)
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %v, want an error about %s", err, tt.wantErr)
			}
		})
	}
}

func TestEmulatorOptionsRunServesOnLoopback(t *testing.T) {
	o := NewEmulatorOptions()
	o.BindAddress, o.Port = "127.0.0.1", 0
	o.Engine = emulated.FastEngine()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- o.Run(ctx) }()
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run() = %v after cancel, want nil", err)
	}
}

// The examples of `lab emulator --help`: each emulator command parses and
// validates as written (the test does not bind their fixed ports), and the
// fault switches they POST work against a running emulator.
func TestEmulatorHelpExamples(t *testing.T) {
	cmd := NewEmulatorCommand(t.Context())
	lines := shdoc.Commands(cmd.Example)
	var emulators, curls int
	for _, line := range lines {
		words, err := shdoc.Words(line)
		if err != nil {
			t.Fatal(err)
		}
		switch words[0] {
		case "lab":
			c := NewEmulatorCommand(t.Context())
			if err := c.ParseFlags(words[2:]); err != nil {
				t.Errorf("%s: %v", line, err)
			}
			emulators++
		case "curl":
			u, err := url.Parse(words[len(words)-1])
			if err != nil {
				t.Fatal(err)
			}
			srv, base := emulated.StartEmulator(t, emulated.FastEngine())
			resp, err := http.Post(base+u.RequestURI(), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(srv.Fault()) != u.Query().Get("mode") {
				t.Errorf("%s: %s, fault now %q", line, resp.Status, srv.Fault())
			}
			curls++
		}
	}
	if emulators != 2 || curls != 2 {
		t.Errorf("ran %d emulator and %d curl examples, want 2 and 2", emulators, curls)
	}
}
