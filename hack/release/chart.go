package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// Media types of a Helm chart stored in an OCI registry, as `helm push` writes them
// (helm.sh/helm/v3/pkg/registry/constants.go) and `helm install oci://…` requires.
const (
	ChartConfigMediaType types.MediaType = "application/vnd.cncf.helm.config.v1+json"
	ChartLayerMediaType  types.MediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// ChartSettings are the values a release writes into the chart.
type ChartSettings struct {
	// Version is the release (vX.Y.Z): the chart's appVersion, and its version without v.
	Version string
	// Values maps a dotted path of values.yaml (image.digest) to the scalar it gets.
	// Each path must name exactly one existing scalar line.
	Values map[string]string
	// Annotations maps a key of Chart.yaml's annotations (artifacthub.io/images) to the
	// scalar it gets; each must exist already.
	Annotations map[string]string
}

// PackagedChart is a chart packaged by PackageChart.
type PackagedChart struct {
	// Name and Version are Chart.yaml's; FileName is <name>-<version>.tgz, Helm's name.
	Name, Version, FileName string
	// Archive is the .tgz; Metadata is Chart.yaml as JSON (the OCI config blob).
	Archive, Metadata []byte
}

// PackageChart packages the chart in dir as `helm package` would (its files under
// <name>/, less what .helmignore lists), with Chart.yaml's version and appVersion and the
// values of s written in, but reproducibly: files sorted, owned by root, mode 0644,
// every time the commit's, and a gzip header without name or time. `helm package`
// stamps the wall clock, so two packages of one commit would differ.
func PackageChart(dir string, s ChartSettings, created time.Time) (*PackagedChart, error) {
	chartVersion, ok := strings.CutPrefix(s.Version, "v")
	if !ok {
		return nil, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", s.Version)
	}
	files, err := readChartFiles(dir)
	if err != nil {
		return nil, err
	}
	if _, ok := files["Chart.yaml"]; !ok {
		return nil, fmt.Errorf("%s: no Chart.yaml", dir)
	}
	if err := applySettings(files, s, chartVersion); err != nil {
		return nil, err
	}
	name, version, metadata, err := chartMetadata(files["Chart.yaml"], filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	archive, err := tarGzip(files, name, created)
	if err != nil {
		return nil, err
	}
	return &PackagedChart{
		Name: name, Version: version, FileName: name + "-" + version + ".tgz",
		Archive: archive, Metadata: metadata,
	}, nil
}

// readChartFiles reads the chart's regular files under dir, less what its
// .helmignore lists, by slash-separated path relative to dir. Errors: a file
// that is not regular (a link), or one that cannot be read.
func readChartFiles(dir string) (map[string][]byte, error) {
	ignore, err := readHelmignore(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.match(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("chart file %s: not a regular file", rel)
		}
		files[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

// applySettings writes the release into the chart's files: Chart.yaml's
// version (chartVersion), appVersion (s.Version) and s.Annotations, and
// s.Values into values.yaml. Errors: a setting whose line is not there.
func applySettings(files map[string][]byte, s ChartSettings, chartVersion string) error {
	chartYAML := files["Chart.yaml"]
	var err error
	if chartYAML, err = setScalar(chartYAML, []string{"version"}, chartVersion); err != nil {
		return fmt.Errorf("chart metadata (Chart.yaml): %w", err)
	}
	if chartYAML, err = setScalar(chartYAML, []string{"appVersion"}, s.Version); err != nil {
		return fmt.Errorf("chart metadata (Chart.yaml): %w", err)
	}
	for _, k := range sortedKeys(s.Annotations) {
		if chartYAML, err = setScalar(chartYAML, []string{"annotations", k}, s.Annotations[k]); err != nil {
			return fmt.Errorf("chart metadata (Chart.yaml): %w", err)
		}
	}
	files["Chart.yaml"] = chartYAML
	values := files["values.yaml"]
	for _, k := range sortedKeys(s.Values) {
		if values, err = setScalar(values, strings.Split(k, "."), s.Values[k]); err != nil {
			return fmt.Errorf("values.yaml: %w", err)
		}
	}
	files["values.yaml"] = values
	return nil
}

// chartMetadata returns Chart.yaml's name and version and the file as JSON
// (the OCI config blob). Errors: not YAML, not apiVersion v2 with a name, or a
// name other than the chart's directory (dirName), which Helm refuses.
func chartMetadata(chartYAML []byte, dirName string) (name, version string, metadata []byte, err error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Name       string `json:"name"`
		Version    string `json:"version"`
	}
	metadata, err = yaml.YAMLToJSON(chartYAML)
	if err != nil {
		return "", "", nil, fmt.Errorf("chart metadata (Chart.yaml): %w", err)
	}
	if err := json.Unmarshal(metadata, &meta); err != nil {
		return "", "", nil, fmt.Errorf("chart metadata (Chart.yaml): %w", err)
	}
	if meta.APIVersion != "v2" || meta.Name == "" {
		return "", "", nil, fmt.Errorf("chart metadata (Chart.yaml): apiVersion %q name %q: want v2 and a name", meta.APIVersion, meta.Name)
	}
	if meta.Name != dirName {
		return "", "", nil, fmt.Errorf("chart %q is in directory %q: Helm wants them equal", meta.Name, dirName)
	}
	return meta.Name, meta.Version, metadata, nil
}

// tarGzip returns files as a gzipped tar, each under dir/, sorted by path,
// mode 0644, modified at created (to the second), with a gzip header without
// name or time.
func tarGzip(files map[string][]byte, dir string, created time.Time) ([]byte, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, n := range names {
		h := &tar.Header{
			Typeflag: tar.TypeReg, Name: path.Join(dir, n), Mode: 0o644,
			Size: int64(len(files[n])), ModTime: created.UTC().Truncate(time.Second),
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ChartArtifact returns the blobs and the manifest of c as an OCI artifact, the form
// `helm push` gives a chart: the config is Chart.yaml as JSON, the one layer the .tgz.
// The manifest's annotations carry p (created is the commit's time, not the push's).
func ChartArtifact(c *PackagedChart, description string, p Provenance) (manifest []byte, blobs map[v1.Hash][]byte, err error) {
	blobs = map[v1.Hash][]byte{}
	desc := func(mt types.MediaType, b []byte) v1.Descriptor {
		h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sha256.Sum256(b))}
		blobs[h] = b
		return v1.Descriptor{MediaType: mt, Size: int64(len(b)), Digest: h}
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        desc(ChartConfigMediaType, c.Metadata),
		Layers:        []v1.Descriptor{desc(ChartLayerMediaType, c.Archive)},
		Annotations: map[string]string{
			"org.opencontainers.image.title":       c.Name,
			"org.opencontainers.image.version":     c.Version,
			"org.opencontainers.image.description": description,
			"org.opencontainers.image.source":      p.Source,
			"org.opencontainers.image.url":         p.Source,
			"org.opencontainers.image.revision":    p.Revision,
			"org.opencontainers.image.created":     p.Created.UTC().Format(time.RFC3339),
			"org.opencontainers.image.licenses":    p.Licenses,
		},
	}
	manifest, err = json.Marshal(m)
	return manifest, blobs, err
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setScalar returns src, a YAML file indented by two spaces a level, with the scalar at
// the key path set to value (double-quoted). The rest of the file, its comments
// included, is left as it is. A path that names no scalar line, or more than one, is an
// error: the chart changed shape and the release must say so rather than ship a default.
func setScalar(src []byte, keys []string, value string) ([]byte, error) {
	keyPath := strings.Join(keys, ".")
	lines := strings.Split(string(src), "\n")
	depth, found := 0, -1
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(trimmed)
		if indent%2 != 0 {
			continue // a continuation line or a sequence item's body
		}
		if indent/2 < depth {
			depth = indent / 2
		}
		if indent/2 != depth {
			continue
		}
		key, rest, ok := strings.Cut(trimmed, ":")
		if !ok || key != keys[depth] {
			continue
		}
		rest = strings.TrimSpace(rest)
		if depth == len(keys)-1 {
			if found >= 0 {
				return nil, fmt.Errorf("%s: set on lines %d and %d", keyPath, found+1, i+1)
			}
			if rest == "" || strings.HasPrefix(rest, "#") {
				return nil, fmt.Errorf("%s (line %d): a mapping, not a scalar", keyPath, i+1)
			}
			found = i
			lines[i] = line[:indent] + key + ": " + strconv.Quote(value)
			continue
		}
		if rest != "" && !strings.HasPrefix(rest, "#") {
			return nil, fmt.Errorf("%s (line %d): %s is a scalar, not a mapping", keyPath, i+1, key)
		}
		depth++
	}
	if found < 0 {
		return nil, fmt.Errorf("%s: no such key", keyPath)
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// helmignore is the patterns of a chart's .helmignore.
type helmignore []string

// readHelmignore reads dir/.helmignore (none: nothing ignored). Helm's rules are
// gitignore-like; the subset supported here is a glob on the base name or the whole
// relative path, and a trailing / for directories. Negations (!) are refused rather than
// misread.
func readHelmignore(dir string) (helmignore, error) {
	f, err := os.Open(filepath.Join(dir, ".helmignore"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out helmignore
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if strings.HasPrefix(p, "!") || strings.Contains(p, "**") {
			return nil, fmt.Errorf(".helmignore: pattern %q: negations and ** are not supported by hack/release", p)
		}
		if _, err := path.Match(strings.TrimSuffix(p, "/"), ""); err != nil {
			return nil, fmt.Errorf(".helmignore: pattern %q: %w", p, err)
		}
		out = append(out, p)
	}
	return out, sc.Err()
}

// match reports whether the file or directory rel is ignored.
func (h helmignore) match(rel string, dir bool) bool {
	for _, p := range h {
		if d, ok := strings.CutSuffix(p, "/"); ok {
			if !dir {
				continue
			}
			p = d
		}
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
		if ok, _ := path.Match(p, path.Base(rel)); ok {
			return true
		}
	}
	return false
}
