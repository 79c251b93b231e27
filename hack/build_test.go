package hack

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// run runs a command in dir and returns its standard output, or its error with its
// standard error.
func run(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// dockerfileInstructions returns the Dockerfile's instructions, continuation lines
// joined and comments dropped, as [keyword, rest].
func dockerfileInstructions(t *testing.T) [][2]string {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		if kw, rest, ok := strings.Cut(cur.String(), " "); ok {
			out = append(out, [2]string{strings.ToUpper(kw), strings.TrimSpace(rest)})
		}
		cur.Reset()
	}
	return out
}

// TestDockerfile checks what the images promise: every base image pinned by digest
// beside its tag; a distroless nonroot stage per image (adapter, the default target
// and so the last stage, and drain), each running its binary as a non-root user with
// an exec-form entrypoint and the OCI labels; and the version ldflags from build args.
func TestDockerfile(t *testing.T) {
	ins := dockerfileInstructions(t)
	pinned := regexp.MustCompile(`^(--platform=\S+ )?[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}( AS \S+)?$`)
	type stage struct {
		from string
		ins  [][2]string
	}
	stages := map[string]*stage{}
	var order []string
	var cur *stage
	for _, in := range ins {
		if in[0] == "FROM" {
			if !pinned.MatchString(in[1]) {
				t.Errorf("FROM %s: want <image>:<tag>@sha256:<digest>", in[1])
			}
			name := in[1]
			if _, as, ok := strings.Cut(in[1], " AS "); ok {
				name = as
			}
			cur = &stage{from: in[1]}
			stages[name] = cur
			order = append(order, name)
			continue
		}
		if cur != nil {
			cur.ins = append(cur.ins, in)
		}
	}
	if len(order) == 0 || order[len(order)-1] != "adapter" {
		t.Fatalf("stages %q: want the adapter stage last, the default target", order)
	}
	for _, image := range []struct{ stage, title string }{{"adapter", "saturation-adapter"}, {"drain", "saturation-adapter-drain"}} {
		st := stages[image.stage]
		if st == nil {
			t.Errorf("no stage %q", image.stage)
			continue
		}
		if !strings.HasPrefix(st.from, "gcr.io/distroless/static-debian12:nonroot@") {
			t.Errorf("stage %s FROM %s: want gcr.io/distroless/static-debian12:nonroot", image.stage, st.from)
		}
		var user, entrypoint string
		labels := map[string]string{}
		labelPair := regexp.MustCompile(`([a-z.]+)="([^"]*)"`)
		for _, in := range st.ins {
			switch in[0] {
			case "USER":
				user = in[1]
			case "ENTRYPOINT":
				entrypoint = in[1]
			case "LABEL":
				for _, m := range labelPair.FindAllStringSubmatch(in[1], -1) {
					labels[m[1]] = m[2]
				}
			}
		}
		if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
			t.Errorf("stage %s USER %q: want a non-root user", image.stage, user)
		}
		var argv []string
		if err := json.Unmarshal([]byte(entrypoint), &argv); err != nil || len(argv) != 1 || argv[0] != "/"+image.stage {
			t.Errorf("stage %s ENTRYPOINT %s: want the exec form [\"/%s\"] (%v)", image.stage, entrypoint, image.stage, err)
		}
		wantLabels := map[string]string{
			"org.opencontainers.image.title":       image.title,
			"org.opencontainers.image.source":      "${SOURCE}",
			"org.opencontainers.image.version":     "${VERSION}",
			"org.opencontainers.image.revision":    "${GIT_COMMIT}",
			"org.opencontainers.image.created":     "${BUILD_DATE}",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.description": labels["org.opencontainers.image.description"],
		}
		if labels["org.opencontainers.image.description"] == "" {
			t.Errorf("stage %s: no org.opencontainers.image.description label", image.stage)
		}
		if diff := cmp.Diff(wantLabels, labels); diff != "" {
			t.Errorf("stage %s OCI labels (-want +got):\n%s", image.stage, diff)
		}
	}

	// The build stage stamps what `make build` stamps, from the build args `make image`
	// passes.
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"gitVersion=${VERSION}", "gitCommit=${GIT_COMMIT}", "gitTreeState=${GIT_TREE_STATE}", "buildDate=${BUILD_DATE}", "gitMajor=${major}", "gitMinor=${minor}"} {
		if !strings.Contains(string(data), "-X k8s.io/component-base/version."+v) {
			t.Errorf("Dockerfile does not stamp %s", v)
		}
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"VERSION", "GIT_COMMIT", "GIT_TREE_STATE", "BUILD_DATE"} {
		if !strings.Contains(string(makefile), "--build-arg "+arg+"=$("+arg+")") {
			t.Errorf("make image does not pass --build-arg %s", arg)
		}
		if !slices.ContainsFunc(ins, func(in [2]string) bool { return in[0] == "ARG" && strings.HasPrefix(in[1], arg+"=") }) {
			t.Errorf("Dockerfile has no ARG %s with a default", arg)
		}
	}
}

// versionReport is what testdata/version prints.
type versionReport struct {
	Info struct {
		Major        string `json:"major"`
		Minor        string `json:"minor"`
		GitVersion   string `json:"gitVersion"`
		GitCommit    string `json:"gitCommit"`
		GitTreeState string `json:"gitTreeState"`
		BuildDate    string `json:"buildDate"`
	} `json:"info"`
	BinaryVersion string `json:"binaryVersion"`
}

// buildVersionReport builds testdata/version with the Makefile's version ldflags for
// makeArgs and returns what it prints.
func buildVersionReport(t *testing.T, makeArgs ...string) versionReport {
	t.Helper()
	ldflags := strings.TrimSpace(string(run(t, "..", "make", append([]string{"-s", "version-ldflags"}, makeArgs...)...)))
	bin := filepath.Join(t.TempDir(), "version")
	run(t, ".", "go", "build", "-ldflags", ldflags, "-o", bin, "./testdata/version")
	var r versionReport
	if err := json.Unmarshal(run(t, ".", bin), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestVersionLDFlags builds a program with the Makefile's version ldflags and checks
// that k8s.io/component-base/version reports them, and that the version derived from
// git without a tag is one the generic API server can parse (it panics otherwise).
func TestVersionLDFlags(t *testing.T) {
	r := buildVersionReport(t, "VERSION=v1.2.3-rc.1", "GIT_COMMIT=0123abcd", "GIT_TREE_STATE=clean", "BUILD_DATE=2026-01-02T03:04:05Z")
	want := versionReport{BinaryVersion: "1.2.3-rc.1"}
	want.Info.Major, want.Info.Minor, want.Info.GitVersion = "1", "2", "v1.2.3-rc.1"
	want.Info.GitCommit, want.Info.GitTreeState, want.Info.BuildDate = "0123abcd", "clean", "2026-01-02T03:04:05Z"
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("stamped version (-want +got):\n%s", diff)
	}

	// The default, from `git describe` (a bare commit in a clone without tags).
	r = buildVersionReport(t)
	if _, err := version.ParseSemantic(r.Info.GitVersion); err != nil || !strings.HasPrefix(r.Info.GitVersion, "v") {
		t.Errorf("default gitVersion %q is not a v-prefixed semantic version: %v", r.Info.GitVersion, err)
	}
	if r.Info.GitCommit == "" || r.Info.BuildDate == "1970-01-01T00:00:00Z" || (r.Info.GitTreeState != "clean" && r.Info.GitTreeState != "dirty") {
		t.Errorf("default version info %+v: want the commit, its date and the tree state", r.Info)
	}
}

// TestRelease runs `make release` twice and checks that the second run writes the
// same bytes (every digest the YAML and the chart pin is then the one the workflow
// pushes), and its outputs: the install, otherwise the committed rendering, with the
// adapter pinned by digest; the chart packaged with that version and both images pinned
// by digest; checksums. hack/release's TestDist checks the images and SBOMs it wrote
// (make test-unit runs it next, on this dist/).
func TestRelease(t *testing.T) {
	helm := os.Getenv("SATURATION_ADAPTER_HELM")
	if helm == "" {
		t.Fatal("SATURATION_ADAPTER_HELM is not set: run the tests with `make test-unit`, which builds helm into .cache/bin and sets it")
	}
	dir := "../dist"
	release := func() map[string][]byte {
		run(t, "..", "make", "-s", "release", "VERSION=v0.1.0", "IMAGE_REPO=registry.example.com/saturation-adapter")
		files := map[string][]byte{}
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			files[p], err = os.ReadFile(p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	first := release()
	second := release()
	if len(first) != len(second) {
		t.Errorf("make release wrote %d files, then %d", len(first), len(second))
	}
	for name, b := range first {
		if !bytes.Equal(b, second[name]) {
			t.Errorf("%s differs between two runs of make release", name)
		}
	}
	var images []struct{ Name, Repository, Digest string }
	if err := json.Unmarshal(first[filepath.Join(dir, "images.json")], &images); err != nil {
		t.Fatal(err)
	}
	if len(images) != 2 || images[0].Repository != "registry.example.com/saturation-adapter" || images[1].Repository != "registry.example.com/saturation-adapter-drain" {
		t.Fatalf("images.json: %+v", images)
	}
	adapterRef := images[0].Repository + "@" + images[0].Digest
	drainRef := images[1].Repository + "@" + images[1].Digest

	got := first[filepath.Join(dir, "saturation-adapter-v0.1.0.yaml")]
	rendered, err := os.ReadFile("../manifests/rendered/saturation-adapter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body := func(b []byte) string { // the YAML without its leading comment lines
		lines := strings.Split(string(b), "\n")
		for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
			lines = lines[1:]
		}
		return strings.Join(lines, "\n")
	}
	want := strings.Replace(body(rendered), "image: saturation-adapter:dev", "image: "+adapterRef, 1)
	if diff := cmp.Diff(want, body(got)); diff != "" {
		t.Errorf("release YAML vs rendered install with the image replaced (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(got), drainRef) {
		t.Errorf("the release YAML's header does not name the drain image %s", drainRef)
	}

	chart := filepath.Join(dir, "saturation-adapter-0.1.0.tgz")
	files := untar(t, chart)
	var meta struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(files["saturation-adapter/Chart.yaml"], &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Version != "0.1.0" || meta.AppVersion != "v0.1.0" {
		t.Errorf("packaged Chart.yaml version %q appVersion %q, want 0.1.0 and v0.1.0", meta.Version, meta.AppVersion)
	}
	out := run(t, ".", helm, "template", "saturation-adapter", chart, "--namespace", "saturation-adapter")
	if !strings.Contains(string(out), `image: "`+adapterRef+`"`) {
		t.Errorf("the packaged chart does not default to image %s", adapterRef)
	}
	out = run(t, ".", helm, "install", "saturation-adapter", chart, "--namespace", "saturation-adapter", "--dry-run=client")
	for _, ref := range []string{"Image: " + adapterRef, adapterRef, drainRef} {
		if !strings.Contains(string(out), ref) {
			t.Errorf("the chart's NOTES do not print %s", ref)
		}
	}

	sums := first[filepath.Join(dir, "SHA256SUMS")]
	for _, f := range []string{"saturation-adapter-v0.1.0.yaml", "saturation-adapter-0.1.0.tgz", "sbom/saturation-adapter_linux_amd64.cdx.json"} {
		if !regexp.MustCompile(`(?m)^[0-9a-f]{64}  ` + regexp.QuoteMeta(f) + `$`).Match(sums) {
			t.Errorf("SHA256SUMS lacks %s:\n%s", f, sums)
		}
	}

	checkWorkflowArtifacts(t, dir, "v0.1.0")

	// A version that is not vMAJOR.MINOR.PATCH is refused.
	for _, v := range []string{"0.1", "v0.1", "latest"} {
		cmd := exec.Command("make", "-s", "release", "VERSION="+v)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "VERSION="+v+": want vMAJOR.MINOR.PATCH") {
			t.Errorf("make release VERSION=%s: err %v, output %s", v, err, out)
		}
	}
}

// checkWorkflowArtifacts checks that the release workflow publishes what make release
// wrote into dir for version: the workflow runs make release on a v* tag, and every
// dist/ path it pushes, attests or uploads (and every file its GitHub release step
// uploads from dist/) exists there.
func checkWorkflowArtifacts(t *testing.T, dir, version string) {
	t.Helper()
	data, err := os.ReadFile("../.github/workflows/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		// sigs.k8s.io/yaml reads YAML 1.1, where the key on is the boolean true.
		On struct {
			Push struct{ Tags []string }
		} `json:"true"`
		Jobs map[string]struct {
			Permissions map[string]string
			Steps       []struct {
				Name, Uses, Run string
				With            map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(wf.On.Push.Tags, []string{"v*"}) {
		t.Errorf("release workflow runs on tags %q, want [v*]", wf.On.Push.Tags)
	}
	job, ok := wf.Jobs["release"]
	if !ok {
		t.Fatal("release workflow has no job release")
	}
	for perm, want := range map[string]string{"id-token": "write", "packages": "write", "contents": "write", "attestations": "write"} {
		if job.Permissions[perm] != want {
			t.Errorf("release job permission %s: %q, want %s", perm, job.Permissions[perm], want)
		}
	}
	expand := strings.NewReplacer(`"`, "", "$VERSION", version, "$CHART_VERSION", strings.TrimPrefix(version, "v"))
	var paths []string
	var uses []string
	ranRelease := false
	for _, st := range job.Steps {
		uses = append(uses, strings.Split(st.Uses, "@")[0])
		ranRelease = ranRelease || strings.Contains(st.Run, "make release VERSION=\"$VERSION\"")
		text := st.Run
		for _, v := range st.With {
			text += "\n" + v
		}
		for _, m := range regexp.MustCompile(`dist/[A-Za-z0-9_.*/$-]+`).FindAllString(text, -1) {
			paths = append(paths, strings.TrimPrefix(expand.Replace(m), "dist/"))
		}
		if strings.Contains(st.Run, "gh release create") {
			// The files uploaded: the words after the options, from dist/.
			line := st.Run[strings.Index(st.Run, "gh release create"):]
			fields := strings.Fields(strings.ReplaceAll(line, "\\\n", " "))
			for i, f := range fields {
				if strings.HasPrefix(f, "\"saturation-adapter-") || f == "SHA256SUMS" || strings.HasPrefix(f, "sbom/") {
					paths = append(paths, expand.Replace(f))
				}
				if f == "--notes-file" {
					paths = append(paths, fields[i+1])
				}
			}
		}
	}
	if !ranRelease {
		t.Error("the release workflow does not run make release VERSION=\"$VERSION\"")
	}
	for _, u := range []string{"sigstore/cosign-installer", "actions/attest-build-provenance"} {
		if !slices.Contains(uses, u) {
			t.Errorf("the release workflow does not use %s", u)
		}
	}
	for _, want := range []string{"saturation-adapter-" + version + ".yaml", "SHA256SUMS", "release-notes.md", "oci/images/saturation-adapter", "oci/charts/saturation-adapter"} {
		if !slices.Contains(paths, want) {
			t.Errorf("the release workflow does not publish dist/%s (it names %q)", want, paths)
		}
	}
	for _, p := range paths {
		if strings.Contains(p, "$") || p == "" {
			continue // a shell variable: checked through the files it comes from
		}
		matches, err := filepath.Glob(filepath.Join(dir, p))
		if err != nil || len(matches) == 0 {
			t.Errorf("the release workflow publishes dist/%s: make release wrote no such file", p)
		}
	}
}

// untar returns the files of a .tgz by name.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

// dockerContext returns the files of the checkout that `docker build .` sends as
// its build context: every file git knows (tracked, or untracked and not
// ignored), less what .dockerignore excludes, read with the matcher Docker itself
// uses (github.com/moby/patternmatcher).
func dockerContext(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, name := range strings.Split(strings.TrimSpace(string(run(t, "..", "git", "ls-files", "--cached", "--others", "--exclude-standard"))), "\n") {
		if _, err := os.Lstat(filepath.Join("..", name)); err != nil {
			continue // deleted in the working tree
		}
		excluded, err := pm.MatchesOrParentMatches(name)
		if err != nil {
			t.Fatal(err)
		}
		if !excluded {
			files = append(files, name)
		}
	}
	return files
}

// TestDockerfileBuilds builds the images' binaries from exactly what the
// Dockerfile copies out of the build context that .dockerignore lets through, as
// `docker build` would (no container engine needed): each COPY of the build stage
// is done into a temporary directory, then the build stage's `go build` of each
// binary runs there. A package the binaries import but the Dockerfile or
// .dockerignore leaves out fails this test.
func TestDockerfileBuilds(t *testing.T) {
	ctxFiles := dockerContext(t)
	ins := dockerfileInstructions(t)
	dir := t.TempDir()
	var bins []string
	for _, in := range ins {
		if in[0] == "FROM" && len(bins) > 0 {
			break // the build stage ends at the next FROM
		}
		switch in[0] {
		case "COPY":
			if strings.HasPrefix(in[1], "--from=") {
				continue
			}
			args := strings.Fields(in[1])
			srcs, dst := args[:len(args)-1], args[len(args)-1]
			for _, src := range srcs {
				src = strings.TrimSuffix(src, "/")
				n := 0
				for _, f := range ctxFiles {
					var target string
					if f == src { // a file: into dst, a directory when dst ends in /
						target = filepath.Join(dir, dst)
						if strings.HasSuffix(dst, "/") {
							target = filepath.Join(dir, dst, filepath.Base(f))
						}
					} else if rest, under := strings.CutPrefix(f, src+"/"); under { // a directory's contents into dst
						target = filepath.Join(dir, dst, rest)
					} else {
						continue
					}
					copyFile(t, filepath.Join("..", f), target)
					n++
				}
				if n == 0 {
					t.Errorf("COPY %s: nothing in the build context matches (.dockerignore excludes it?)", src)
				}
			}
		case "RUN":
			if m := regexp.MustCompile(`for bin in ([a-z ]+); do`).FindStringSubmatch(in[1]); m != nil && strings.Contains(in[1], "./cmd/$bin") {
				bins = strings.Fields(m[1])
			}
		}
	}
	if !slices.Equal(bins, []string{"adapter", "drain"}) {
		t.Fatalf("the build stage builds %q, want [adapter drain]", bins)
	}
	for _, b := range bins {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(t.TempDir(), b), "./cmd/"+b)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("go build ./cmd/%s from the Dockerfile's paths: %v\n%s", b, err, out)
		}
	}
	// Nothing but what the binaries need: the lab and the tests stay out.
	for _, f := range ctxFiles {
		if strings.HasPrefix(f, "lab/") || strings.HasPrefix(f, "test/") || strings.HasSuffix(f, "_test.go") {
			t.Errorf("the build context holds %s", f)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInstallDoc checks that the README installs, and docs/install.md verifies, what the release
// workflow publishes: the chart at CHART_REPO, the YAML under the release's download
// URL as make release names it, images at IMAGE_REPO, and signatures by the workflow's
// own identity at a v* tag.
func TestInstallDoc(t *testing.T) {
	install, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The README has the install lines, docs/install.md the verification.
	doc := append(append(readme, '\n'), install...)
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	workflow, err := os.ReadFile("../.github/workflows/release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + ` \?= (\S+)$`).FindSubmatch(makefile)
		if m == nil {
			t.Fatalf("the Makefile has no %s ?= default", name)
		}
		return string(m[1])
	}
	imageRepo, chartRepo, source := def("IMAGE_REPO"), def("CHART_REPO"), def("RELEASE_SOURCE")
	for _, want := range []string{
		"helm install saturation-adapter oci://" + chartRepo + "/saturation-adapter --version X.Y.Z ",
		"kubectl apply -f " + source + "/releases/download/vX.Y.Z/saturation-adapter-vX.Y.Z.yaml\n",
		`IDENTITY="` + source + `/.github/workflows/release.yaml@refs/tags/$VERSION"`,
		"ISSUER=https://token.actions.githubusercontent.com\n",
		"grep -o '" + imageRepo + "@sha256:",
		"grep -o '" + imageRepo + "-drain@sha256:",
		"sha256sum -c SHA256SUMS",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("README.md and docs/install.md lack %q", want)
		}
	}
	// The workflow publishes to the same repositories and uploads the YAML the doc
	// downloads; the identity the doc verifies is this workflow's file.
	for _, want := range []string{"IMAGE_REPO: " + imageRepo + "\n", "CHART_REPO: " + chartRepo + "\n", `"saturation-adapter-$VERSION.yaml"`, "cosign sign"} {
		if !strings.Contains(string(workflow), want) {
			t.Errorf("the release workflow lacks %q", want)
		}
	}
	if source != "https://github.com/saturation-adapter/saturation-adapter" {
		t.Errorf("RELEASE_SOURCE %s: the GitHub repository the workflow runs in", source)
	}
}
