package signals

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// extractReference is extraction without the prefilter: the whole body goes to
// Prometheus's textparse, and the same choice of samples and the same fold
// follow. The prefilter must give the same answers on every body textparse
// reads whole (TestPrefilterMatchesReference).
func (e *Extractor) extractReference(body []byte, contentType string) (Reading, error) {
	b := &scanBuffers{}
	om := isOpenMetrics(contentType)
	if err := e.parse(om, body, b); err != nil {
		return Reading{}, err
	}
	e.noteFlowFamilies(om, body, b)
	return e.reading(b, filterStats{})
}

// noteFlowFamilies notes, as the prefilter does, the flow-control families of
// the series in body that the extractor does not read.
func (e *Extractor) noteFlowFamilies(om bool, body []byte, b *scanBuffers) {
	var p textparse.Parser
	if om {
		p = textparse.NewOpenMetricsParser(body, labels.NewSymbolTable())
	} else {
		p = textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	}
	var lset labels.Labels
	for {
		entry, err := p.Next()
		if err != nil {
			return // parse has reported it
		}
		if entry != textparse.EntrySeries {
			continue
		}
		p.Labels(&lset)
		if name := lset.Get(model.MetricNameLabel); !e.index.read[name] {
			e.noteFlowFamily([]byte(name), b)
		}
	}
}

// wholeBodyParses reports whether textparse reads the whole body without an
// error, as the reference extraction needs.
func wholeBodyParses(body []byte, om bool) error {
	var p textparse.Parser
	if om {
		p = textparse.NewOpenMetricsParser(body, labels.NewSymbolTable())
	} else {
		p = textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	}
	for {
		_, err := p.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// TestPrefilterMatchesReference holds the prefiltered extraction to the
// reference (the whole body through textparse) on every sample and hazard
// .prom file that textparse reads whole: the same Reading, or the same kind of
// error, with histograms on and off and with a gateway metric read, before
// and after the series cache learned the body.
func TestPrefilterMatchesReference(t *testing.T) {
	var files []string
	for _, dir := range []string{"samples", "hazards"} {
		got, err := filepath.Glob(filepath.Join("..", "..", "testdata", dir, "*.prom"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, got...)
	}
	if len(files) < 20 {
		t.Fatalf("%d .prom files under testdata, want the samples and the hazards", len(files))
	}
	extractors := map[string]*Extractor{
		"every family":  NewExtractor(),
		"no histograms": NewExtractorWith(ExtractOptions{}),
		"gateway":       NewExtractorWith(ExtractOptions{Histograms: true, GatewayMetrics: []string{DefaultGatewayQueueMetric}}),
	}
	compared := 0
	for _, f := range files {
		body := readTestdata(t, filepath.Join(filepath.Base(filepath.Dir(f)), filepath.Base(f)))
		types := map[string]bool{"text/plain; version=0.0.4": false}
		if bytes.Contains(body, []byte("# EOF")) {
			types["application/openmetrics-text; version=1.0.0"] = true
		}
		for ctype, om := range types {
			if err := wholeBodyParses(body, om); err != nil {
				t.Logf("%s as %s: textparse does not read the whole body (%v); no reference", filepath.Base(f), ctype, err)
				continue
			}
			for name, e := range extractors {
				t.Run(filepath.Base(f)+"/"+ctype+"/"+name, func(t *testing.T) {
					want, wantErr := e.extractReference(body, ctype)
					// Twice: the second time the series cache has learned the body.
					for _, pass := range []string{"first", "second"} {
						got, err := e.ExtractContent(body, ctype)
						if kind(err) != kind(wantErr) {
							t.Fatalf("%s extraction: error %v, the reference's %v", pass, err, wantErr)
						}
						if diff := cmp.Diff(want, got, cmp.AllowUnexported(Reading{}, Fold{}, EngineSignals{}, Values{})); diff != "" {
							t.Errorf("%s prefiltered reading differs from the reference (-reference +prefiltered):\n%s", pass, diff)
						}
					}
				})
				compared++
			}
		}
	}
	if compared < 3*len(files) {
		t.Errorf("compared %d extractions of %d files; most files should parse whole", compared, len(files))
	}
}

// kind names the class of an extraction error, for comparing errors whose
// messages differ only in line numbers.
func kind(err error) string {
	for _, k := range []error{ErrNoEngineMetrics, ErrParse, ErrTooManySeries, ErrTooManyEngines} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}
