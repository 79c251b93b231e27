package app

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	cliflag "k8s.io/component-base/cli/flag"
	"sigs.k8s.io/yaml"

	"github.com/saturation-adapter/saturation-adapter/internal/doctest"
	"github.com/saturation-adapter/saturation-adapter/internal/shdoc"
	"github.com/saturation-adapter/saturation-adapter/lab/emulator"
	"github.com/saturation-adapter/saturation-adapter/lab/simulate"
)

// scoreboardDoc is the lab's scoreboard: methods, frontier tables, the
// controls that see ahead, and the flags of simulate, scoreboard and
// calibrate. Its commands are run as written and its tables compared.
const scoreboardDoc = "docs/scoreboard.md"

func scoreboardDocText(t *testing.T) string {
	t.Helper()
	return doctest.Read(t, repoRoot, scoreboardDoc)
}

// runDocSection runs every `lab …` command of the doc's section as written,
// from a directory like the checkout's root, and checks that each prints the
// block that follows it.
func runDocSection(t *testing.T, section string, want int) {
	t.Helper()
	md := scoreboardDocText(t)
	cmds := doctest.Commands(t, scoreboardDoc, md, section, "lab")
	if len(cmds) != want {
		t.Fatalf("%d commands in %q, want %d", len(cmds), section, want)
	}
	doctest.InCheckoutDir(t, repoRoot)
	for _, c := range cmds {
		out, progress, err := runRoot(c.Args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.Line, err, progress)
		}
		if table := doctest.Output(t, md, c.Block); out != table {
			t.Errorf("%s line %d: %s prints:\n%s\nthe doc shows:\n%s", scoreboardDoc, c.Block.Line, c.Line, out, table)
		}
	}
}

// TestScoreboardDocShortRun runs the doc's short scoreboard (two 5-minute
// slices, two seeds, four families) and compares its tables byte for byte: the
// scoreboard's output depends only on its flags and seeds. Too slow under
// -race; `make test` runs it without.
func TestScoreboardDocShortRun(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("replays for seconds of CPU; slow under -race or -short")
	}
	runDocSection(t, "A scoreboard in seconds", 1)
}

// TestScoreboardDocReplay runs the doc's lab simulate example and compares
// its table.
func TestScoreboardDocReplay(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("slow under -race or -short")
	}
	runDocSection(t, "One replay, autoscaler by autoscaler", 1)
}

// TestScoreboardDocFullTables reproduces the doc's frontier tables (both
// traces, both half-hours, 10 seeds, and again with a faster scale-down, with
// the scale-up window swept, with Kubernetes' default behavior and with the
// trend):
// about a quarter to half an hour of CPU each, so only with
// LAB_FULL_SCOREBOARD=1.
func TestScoreboardDocFullTables(t *testing.T) {
	if os.Getenv("LAB_FULL_SCOREBOARD") == "" {
		t.Skip("set LAB_FULL_SCOREBOARD=1 to replay the full scoreboards (about half an hour of CPU each)")
	}
	// One subtest per section: each runs in its own checkout-like directory
	// (doctest.InCheckoutDir changes it until the subtest ends).
	for _, c := range []struct {
		name, section string
		commands      int
	}{
		{"conversation", "The conversation trace", 1},
		{"code", "The code trace", 1},
		{"faster-scale-down", "Faster scale-down", 2},
		{"scale-up-window", "Scale-up window, swept", 2},
		{"default-scale-up", "The default scale-up alone", 3},
		{"default-behavior", "The whole default behavior", 2},
		{"trend", "The trend", 3},
	} {
		t.Run(c.name, func(t *testing.T) { runDocSection(t, c.section, c.commands) })
	}
}

// flagTable renders a command's flag groups as the doc's Markdown table.
func flagTable(fss cliflag.NamedFlagSets) string {
	var b strings.Builder
	b.WriteString("| group | flag | default | meaning |\n|---|---|---|---|\n")
	for _, name := range fss.Order {
		fss.FlagSets[name].VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			def := "`" + f.DefValue + "`"
			if f.DefValue == "" || f.DefValue == "[]" {
				def = "none"
			}
			usage := strings.ReplaceAll(f.Usage, "|", `\|`)
			fmt.Fprintf(&b, "| %s | `--%s` | %s | %s |\n", name, f.Name, def, usage)
		})
	}
	return b.String()
}

// TestScoreboardDocFlags: the doc's flag tables are the commands' flags, by
// group, with their defaults and help (regenerated from the commands: the
// test prints the expected table).
func TestScoreboardDocFlags(t *testing.T) {
	md := scoreboardDocText(t)
	for _, c := range []struct {
		heading string
		fss     cliflag.NamedFlagSets
	}{
		{"Flags of lab simulate", NewSimulateOptions().Flags()},
		{"Flags of lab scoreboard", NewScoreboardOptions().Flags()},
		{"Flags of lab calibrate", NewCalibrateOptions().Flags()},
	} {
		want := flagTable(c.fss)
		if got := doctest.Section(t, md, c.heading); !strings.Contains(got, want) {
			t.Errorf("%s: section %q does not hold the command's flags; it should read:\n%s", scoreboardDoc, c.heading, want)
		}
	}
}

// TestScoreboardDocProfile: the doc's engine profile is accepted by --profile
// and is the emulator's default engine.
func TestScoreboardDocProfile(t *testing.T) {
	block := firstYAMLBlock(t, doctest.Section(t, scoreboardDocText(t), "The engine profile"), "the engine profile section")
	path := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(path, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := simulate.LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != emulator.DefaultConfig() {
		t.Errorf("the doc's profile is %+v, the emulator's default %+v", got, emulator.DefaultConfig())
	}
}

// The examples of `lab simulate --help`, `lab scoreboard --help` and `lab
// calibrate --help` parse and validate as written; the simulate and
// scoreboard ones also run (their windows are short), from a directory like
// the checkout's root with the files they name.
func TestLabHelpExamples(t *testing.T) {
	demand := hpaDemand(t)
	dir := doctest.InCheckoutDir(t, repoRoot)
	if err := os.WriteFile(filepath.Join(dir, "my-hpa.yaml"), []byte(demand), 0o644); err != nil {
		t.Fatal(err)
	}
	policies := "apiVersion: saturation-adapter.io/v1alpha1\nkind: PolicyConfig\npolicies:\n- name: chat-ahead\n  kind: mean\n" +
		"  terms: [{kind: queueDepth, setPoint: 2}, {kind: demandRate, setPoint: 12, window: 30s}]\n  peak: {window: 10m, headroom: 0.1}\n"
	ahead := strings.Replace(strings.Replace(demand, "llm_demand_replicas", "chat-ahead", 1), "type: AverageValue, averageValue: \"1\"", "type: Value, value: \"1\"", 1)
	for name, body := range map[string]string{"policies.yaml": policies, "chat-ahead-hpa.yaml": ahead} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"simulate", "scoreboard", "calibrate"} {
		cmd, _, err := NewCommand(context.Background()).Find([]string{sub})
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		for _, line := range shdocCommands(t, cmd.Example) {
			if !strings.HasPrefix(line, "lab ") || strings.HasSuffix(line, "&") {
				continue // kubectl, and the emulator started in the background
			}
			words := shdocWords(t, line)
			if sub == "calibrate" || (sub == "scoreboard" && strings.Contains(line, "conv-scoreboard.json")) {
				// No engine to calibrate here, and the full scoreboard takes half
				// an hour: these parse and validate only.
				c := NewCommand(context.Background())
				found, rest, err := c.Find(words[1:])
				if err == nil {
					err = found.ParseFlags(rest)
				}
				if err != nil {
					t.Errorf("%s: %v", line, err)
				}
				ran++
				continue
			}
			if raceDetector || testing.Short() {
				continue
			}
			var out bytes.Buffer
			o, progress, err := runRoot(words[1:]...)
			out.WriteString(o)
			if err != nil || out.Len() == 0 {
				t.Errorf("%s: %v\n%s", line, err, progress)
			}
			ran++
		}
		if ran == 0 && !(raceDetector || testing.Short()) {
			t.Errorf("lab %s --help has no lab example", sub)
		}
	}
}

// hpaDemand is testdata/hpa-demand.yaml: the HPA on llm_demand_replicas.
func hpaDemand(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "hpa-demand.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func shdocCommands(t *testing.T, text string) []string {
	t.Helper()
	return shdoc.Commands(text)
}

func shdocWords(t *testing.T, line string) []string {
	t.Helper()
	w, err := shdoc.Words(line)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestScoreboardDocDemandRateBehavior: the behavior the doc pairs with a
// demand-rate term is the one its scale-up sweep chose for it: the scale-down
// of the sweep's first command (the conversation trace) and the scale-up
// window of saturation+rate's tuned point in the table that command prints.
func TestScoreboardDocDemandRateBehavior(t *testing.T) {
	md := scoreboardDocText(t)
	section := doctest.Section(t, md, "The controls that see ahead")
	at := strings.Index(section, "**The HPA behavior to pair with a demand-rate term.**")
	if at < 0 {
		t.Fatal("no behavior to pair with a demand-rate term in the doc")
	}
	block := firstYAMLBlock(t, section[at:], "the behavior's paragraph")
	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := yaml.UnmarshalStrict([]byte("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec:\n"+block), &hpa); err != nil {
		t.Fatalf("the doc's behavior does not parse as an HPA's spec.behavior: %v\n%s", err, block)
	}
	cmds := doctest.Commands(t, scoreboardDoc, md, "Scale-up window, swept", "lab")
	if len(cmds) == 0 {
		t.Fatal("no lab command in Scale-up window, swept")
	}
	o := NewScoreboardOptions()
	fs := pflag.NewFlagSet("scoreboard", pflag.ContinueOnError)
	for _, f := range o.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(cmds[0].Args[1:]); err != nil { // Args[0] is the subcommand
		t.Fatalf("%s: %v", cmds[0].Line, err)
	}
	// The forward table's row of saturation+rate names its tuned point.
	out := doctest.Output(t, md, cmds[0].Block)
	m := regexp.MustCompile(`(?m)^\| saturation\+rate \| rate=[0-9.]+,up=([0-9]+)s \| [^\n]*\| (yes|no)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no tuned saturation+rate point in the output of %s", cmds[0].Line)
	}
	up, err := time.ParseDuration(m[1] + "s")
	if err != nil {
		t.Fatal(err)
	}
	o.ScaleUpWindows = []time.Duration{up}
	if diff := cmp.Diff(o.grid().HPABehavior(), hpa.Spec.Behavior); diff != "" {
		t.Errorf("the doc's behavior is not the one %s chose for saturation+rate (-chosen +doc):\n%s", cmds[0].Line, diff)
	}
}

// firstYAMLBlock returns the body of the first yaml block of md (where says
// which part of the doc md is, for the failure).
func firstYAMLBlock(t *testing.T, md, where string) string {
	t.Helper()
	at := strings.Index(md, "```yaml\n")
	if at < 0 {
		t.Fatalf("no yaml block in %s", where)
	}
	block := md[at+len("```yaml\n"):]
	return block[:strings.Index(block, "```")]
}
