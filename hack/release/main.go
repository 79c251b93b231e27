package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Images are the images of a release: one per binary that runs in a cluster (the lab
// tool never does). The drain image's repository is the adapter's with -drain appended.
var Images = []ImageSpec{
	{
		Name: "saturation-adapter", Title: "saturation-adapter", Entrypoint: "adapter",
		Description: "Kubernetes External metrics API server that autoscales LLM inference servers on queue depth and KV-cache usage",
	},
	{
		Name: "saturation-adapter-drain", Title: "saturation-adapter-drain", Entrypoint: "drain",
		Description: "preStop helper that waits until an LLM engine has nothing running or waiting",
	},
}

// Architectures are the Linux architectures every image is built for.
var Architectures = []string{"amd64", "arm64"}

// ImageRecord is one image of images.json: what the workflow pushes, signs and attests.
type ImageRecord struct {
	Name       string `json:"name"`
	Repository string `json:"repository"`
	// Layout is the OCI layout's directory, relative to the output directory.
	Layout string `json:"layout"`
	// Digest is the image index's.
	Digest    string           `json:"digest"`
	Platforms []PlatformRecord `json:"platforms"`
}

// PlatformRecord is one platform image of an ImageRecord and its SBOM file.
type PlatformRecord struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
	SBOM     string `json:"sbom"`
}

var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// provenanceFlags registers the flags every artifact needs and returns a function that
// validates them (every bad one reported at once).
func provenanceFlags(fs *flag.FlagSet) func() (Provenance, error) {
	version := fs.String("version", "", "release version, vMAJOR.MINOR.PATCH[-PRERELEASE]")
	revision := fs.String("revision", "", "git commit the artifacts are built from")
	created := fs.String("created", "", "the commit's time, RFC 3339 (the only time recorded)")
	source := fs.String("source", "https://github.com/saturation-adapter/saturation-adapter", "repository URL")
	licenses := fs.String("licenses", "Apache-2.0", "SPDX licence expression")
	return func() (Provenance, error) {
		var errs []error
		if !versionRE.MatchString(*version) {
			errs = append(errs, fmt.Errorf("-version=%q: want vMAJOR.MINOR.PATCH[-PRERELEASE]", *version))
		}
		if *revision == "" {
			errs = append(errs, errors.New("-revision: required (the git commit)"))
		}
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			errs = append(errs, fmt.Errorf("-created=%q: want an RFC 3339 time: %w", *created, err))
		}
		return Provenance{Version: *version, Revision: *revision, Created: t, Source: *source, Licenses: *licenses}, errors.Join(errs...)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// run runs the release subcommand args[0] with the flags that follow it.
func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: release images|digest|chart|notes|push [flags]")
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	switch args[0] {
	case "images":
		return runImages(fs, args[1:])
	case "digest":
		return runDigest(fs, args[1:])
	case "chart":
		return runChart(fs, args[1:])
	case "notes":
		return runNotes(fs, args[1:])
	case "push":
		return runPush(ctx, fs, args[1:])
	}
	return fmt.Errorf("unknown command %q: want images, digest, chart, notes or push", args[0])
}

// runImages is `release images`: it builds the images of the binaries and
// writes their OCI layouts, SBOMs and images.json.
func runImages(fs *flag.FlagSet, args []string) error {
	prov := provenanceFlags(fs)
	binDir := fs.String("bin-dir", "", "directory of the binaries: <bin-dir>/linux_<arch>/<entrypoint>")
	out := fs.String("out", "dist", "output directory: oci/images/<name>/, sbom/, images.json")
	repo := fs.String("image-repo", "", "the adapter image's repository (the drain image's is <it>-drain)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := prov()
	if err != nil {
		return err
	}
	if *binDir == "" || *repo == "" {
		return errors.New("-bin-dir and -image-repo are required")
	}
	return writeImages(*binDir, *out, *repo, p)
}

// runDigest is `release digest`: it prints the digest of an OCI layout's
// image index.
func runDigest(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: release digest <OCI layout dir>")
	}
	d, err := LayoutEntry(fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Println(d.Digest)
	return nil
}

// runChart is `release chart`: it packages the chart with the images of
// images.json pinned by digest and writes the .tgz and its OCI layout.
func runChart(fs *flag.FlagSet, args []string) error {
	prov := provenanceFlags(fs)
	dir := fs.String("chart", "", "chart directory")
	out := fs.String("out", "dist", "output directory: <name>-<version>.tgz and oci/charts/<name>/")
	images := fs.String("images", "", "images.json of `release images`: the images the chart pins by digest")
	var set setFlag
	fs.Var(&set, "set", "path=value written into values.yaml (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := prov()
	if err != nil {
		return err
	}
	if *dir == "" || *images == "" {
		return errors.New("-chart and -images are required")
	}
	s, err := chartSettings(*images, p.Version)
	if err != nil {
		return err
	}
	for k, v := range set {
		s.Values[k] = v
	}
	return writeChart(*dir, *out, s, p)
}

// runNotes is `release notes`: it prints the version's release notes from the
// changelog, with an install section when given images.json.
func runNotes(fs *flag.FlagSet, args []string) error {
	changelog := fs.String("changelog", "CHANGELOG.md", "the changelog")
	version := fs.String("version", "", "release version")
	require := fs.Bool("require-section", false, "fail unless the changelog has a section for the version")
	images := fs.String("images", "", "images.json of `release images`: adds an install section naming them")
	chartRepo := fs.String("chart-repo", "", "where the chart is published (with -images)")
	source := fs.String("source", "https://github.com/saturation-adapter/saturation-adapter", "repository URL (with -images)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !versionRE.MatchString(*version) {
		return fmt.Errorf("-version=%q: want vMAJOR.MINOR.PATCH[-PRERELEASE]", *version)
	}
	b, err := os.ReadFile(*changelog)
	if err != nil {
		return err
	}
	notes, err := ReleaseNotes(b, *version, *require)
	if err != nil {
		return err
	}
	if *images != "" {
		if *chartRepo == "" {
			return errors.New("-images needs -chart-repo")
		}
		recs, err := readImages(*images)
		if err != nil {
			return err
		}
		notes += "\n" + InstallNotes(*version, *chartRepo, *source, recs)
	}
	_, err = os.Stdout.WriteString(notes)
	return err
}

// runPush is `release push`: it pushes each OCI layout to its reference and
// prints what it pushed.
func runPush(ctx context.Context, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: release push <OCI layout dir>=<registry/repository:tag> [more pairs]")
	}
	for _, a := range fs.Args() {
		dir, ref, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want <OCI layout dir>=<registry/repository:tag>", a)
		}
		pushed, err := Push(ctx, dir, ref)
		if err != nil {
			return err
		}
		fmt.Println(pushed)
	}
	return nil
}

// setFlag collects -set path=value.
type setFlag map[string]string

func (s *setFlag) String() string { return fmt.Sprint(map[string]string(*s)) }

func (s *setFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want path=value", v)
	}
	if *s == nil {
		*s = map[string]string{}
	}
	(*s)[k] = val
	return nil
}

// writeImages builds every image of Images for Architectures from binDir and writes
// out/oci/images/<name>/ (OCI layouts tagged with the version), out/sbom/ and
// out/images.json.
func writeImages(binDir, out, repo string, p Provenance) error {
	if err := os.MkdirAll(filepath.Join(out, "sbom"), 0o755); err != nil {
		return err
	}
	var records []ImageRecord
	for _, spec := range Images {
		imgRepo := repo + strings.TrimPrefix(spec.Name, "saturation-adapter")
		for _, arch := range Architectures {
			pl := Platform{OS: "linux", Architecture: arch, Binary: filepath.Join(binDir, "linux_"+arch, spec.Entrypoint)}
			if arch == "arm64" {
				pl.Variant = "v8"
			}
			spec.Platforms = append(spec.Platforms, pl)
		}
		idx, err := BuildIndex(spec, p)
		if err != nil {
			return err
		}
		layoutDir := filepath.Join("oci", "images", spec.Name)
		if err := WriteIndexLayout(filepath.Join(out, layoutDir), idx, p.Version); err != nil {
			return err
		}
		digest, err := idx.Digest()
		if err != nil {
			return err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return err
		}
		rec := ImageRecord{Name: spec.Name, Repository: imgRepo, Layout: layoutDir, Digest: digest.String()}
		for i, m := range im.Manifests {
			pl := spec.Platforms[i]
			sbomFile := filepath.Join("sbom", fmt.Sprintf("%s_%s_%s.cdx.json", spec.Name, pl.OS, pl.Architecture))
			sbom, err := SBOM(pl.Binary, imgRepo, m.Digest.String(), p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(out, sbomFile), sbom, 0o644); err != nil {
				return err
			}
			rec.Platforms = append(rec.Platforms, PlatformRecord{Platform: pl.String(), Digest: m.Digest.String(), SBOM: sbomFile})
		}
		records = append(records, rec)
		fmt.Printf("%s@%s\n", imgRepo, digest)
	}
	b, err := json.MarshalIndent(records, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "images.json"), append(b, '\n'), 0o644)
}

// writeChart packages the chart in dir into out/<name>-<version>.tgz and
// out/oci/charts/<name>/ (an OCI layout tagged with the chart version).
func writeChart(dir, out string, s ChartSettings, p Provenance) error {
	c, err := PackageChart(dir, s, p.Created)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, c.FileName), c.Archive, 0o644); err != nil {
		return err
	}
	var meta struct {
		Description string `json:"description"`
	}
	if err := json.Unmarshal(c.Metadata, &meta); err != nil {
		return err
	}
	manifest, blobs, err := ChartArtifact(c, meta.Description, p)
	if err != nil {
		return err
	}
	h, err := WriteArtifactLayout(filepath.Join(out, "oci", "charts", c.Name), manifest, blobs, c.Version)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", c.FileName, c.Name, h)
	return nil
}

// ChartImageValues maps an image of Images to the values.yaml block of the chart that
// refers to it.
var ChartImageValues = map[string]string{
	"saturation-adapter":       "image",
	"saturation-adapter-drain": "drain.image",
}

// chartSettings returns what a release writes into the chart: each image of the
// images.json file pinned by digest (repository and digest of its values block) and
// listed, by digest, in the Artifact Hub annotations.
func chartSettings(imagesFile, version string) (ChartSettings, error) {
	records, err := readImages(imagesFile)
	if err != nil {
		return ChartSettings{}, err
	}
	s := ChartSettings{Version: version, Values: map[string]string{}, Annotations: map[string]string{}}
	type ahImage struct {
		Name      string   `json:"name"`
		Image     string   `json:"image"`
		Platforms []string `json:"platforms"`
	}
	var listed []ahImage
	for _, r := range records {
		block, ok := ChartImageValues[r.Name]
		if !ok {
			return ChartSettings{}, fmt.Errorf("%s: image %s has no values block in the chart", imagesFile, r.Name)
		}
		s.Values[block+".repository"] = r.Repository
		s.Values[block+".digest"] = r.Digest
		im := ahImage{Name: r.Name, Image: r.Repository + "@" + r.Digest}
		for _, p := range r.Platforms {
			im.Platforms = append(im.Platforms, p.Platform)
		}
		listed = append(listed, im)
	}
	if len(listed) != len(ChartImageValues) {
		return ChartSettings{}, fmt.Errorf("%s: %d images, want %d", imagesFile, len(listed), len(ChartImageValues))
	}
	// YAML's flow style is JSON: Artifact Hub reads the annotation as YAML.
	ah, err := json.Marshal(listed)
	if err != nil {
		return ChartSettings{}, err
	}
	s.Annotations["artifacthub.io/images"] = string(ah)
	s.Annotations["artifacthub.io/prerelease"] = strconv.FormatBool(strings.Contains(version, "-"))
	return s, nil
}

// readImages reads an images.json of `release images`.
func readImages(file string) ([]ImageRecord, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var records []ImageRecord
	if err := json.Unmarshal(b, &records); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return records, nil
}
