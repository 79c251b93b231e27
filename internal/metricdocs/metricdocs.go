// Package metricdocs reads the documentation's table of the adapter's own
// metrics (Doc), so that each package's tests can check that what it registers is
// documented: names, types, label names and, for labels with a fixed set of
// values, the values.
package metricdocs

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Doc is the document holding the table, relative to the repository's root.
const Doc = "docs/operations.md"

// Metric is one row of the metric table.
type Metric struct {
	// Type is "counter", "gauge" or "histogram".
	Type string
	// Labels maps each label name to its documented values, sorted; nil for a
	// label whose values are open (a namespace, an HPA name).
	Labels map[string][]string
}

var (
	row     = regexp.MustCompile("(?m)^\\| `(saturation_adapter_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	label   = regexp.MustCompile("`([a-z_]+)`(?: \\(([^)]*)\\))?")
	literal = regexp.MustCompile("`([^`]+)`")
)

// Read parses the table rows of the document at path (Doc, from the test's
// directory). Errors name the file.
func Read(path string) (map[string]Metric, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]Metric{}
	for _, r := range row.FindAllStringSubmatch(string(b), -1) {
		m := Metric{Type: r[2], Labels: map[string][]string{}}
		for _, l := range label.FindAllStringSubmatch(r[3], -1) {
			var values []string
			for _, v := range literal.FindAllStringSubmatch(l[2], -1) {
				values = append(values, v[1])
			}
			slices.Sort(values)
			m.Labels[l[1]] = values
		}
		out[r[1]] = m
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no metric table rows found", path)
	}
	return out, nil
}

// FromFamilies describes gathered metric families as the table would: type,
// label names and the label values seen, sorted. Labels listed in open keep nil
// values (their values are not documented one by one).
func FromFamilies(fams []*dto.MetricFamily, open ...string) map[string]Metric {
	out := map[string]Metric{}
	for _, f := range fams {
		m := Metric{Type: strings.ToLower(f.GetType().String()), Labels: map[string][]string{}}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				vs := m.Labels[lp.GetName()]
				if !slices.Contains(open, lp.GetName()) && !slices.Contains(vs, lp.GetValue()) {
					vs = append(vs, lp.GetValue())
					slices.Sort(vs)
				}
				m.Labels[lp.GetName()] = vs
			}
		}
		out[f.GetName()] = m
	}
	return out
}
