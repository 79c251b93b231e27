package prometheus

import (
	"encoding/json"
	"fmt"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/saturation-adapter/saturation-adapter/internal/excerpt"
)

// The reference the stream decoder (decodeStream) is held to: the plain
// library path, the body decoded whole by encoding/json into
// prometheus/common's model types, as client_golang's API client decodes an
// answer. FuzzDecodeStream checks that the two read every answer both accept
// the same way.

// response is the envelope of the Prometheus HTTP API
// (https://prometheus.io/docs/prometheus/latest/querying/api/#format-overview).
type response struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// Decode reads an instant-query answer, the JSON body Prometheus's
// /api/v1/query returns: a vector (one sample per series) or a matrix (a range
// selector's raw samples with their own timestamps), with
// prometheus/common/model's own types. Errors wrap ErrResponse and say what is
// wrong.
func Decode(body []byte) (model.Value, error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: not a Prometheus API response: %s", ErrResponse, excerpt.String(err.Error(), 200))
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%w: status %q: %s: %s", ErrResponse, excerpt.String(r.Status, 40),
			excerpt.String(r.ErrorType, 40), excerpt.String(r.Error, 300))
	}
	var data struct {
		Type   model.ValueType `json:"resultType"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return nil, fmt.Errorf("%w: data: %s", ErrResponse, excerpt.String(err.Error(), 200))
	}
	switch data.Type {
	case model.ValVector:
		var v model.Vector
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, fmt.Errorf("%w: vector: %s", ErrResponse, excerpt.String(err.Error(), 200))
		}
		return v, nil
	case model.ValMatrix:
		var m model.Matrix
		if err := json.Unmarshal(data.Result, &m); err != nil {
			return nil, fmt.Errorf("%w: matrix: %s", ErrResponse, excerpt.String(err.Error(), 200))
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: result type %q; want vector or matrix (an instant query, of a series selector or a range selector)",
		ErrResponse, excerpt.String(data.Type.String(), 40))
}

// seriesOf flattens a query result into series. A vector's samples carry the
// evaluation time (Prometheus stamps instant vectors so); a matrix's carry
// their own. Scalars and strings have no series. Native histogram samples are
// skipped: the engines expose classic histograms.
func seriesOf(v model.Value) []series {
	switch x := v.(type) {
	case model.Vector:
		out := make([]series, 0, len(x))
		for _, s := range x {
			if s == nil || s.Histogram != nil {
				continue
			}
			out = append(out, series{labels: labelsOf(s.Metric), points: []point{{t: s.Timestamp.Time(), v: float64(s.Value)}}})
		}
		return out
	case model.Matrix:
		out := make([]series, 0, len(x))
		for _, s := range x {
			if s == nil || len(s.Values) == 0 {
				continue
			}
			ps := make([]point, len(s.Values))
			for i, p := range s.Values {
				ps[i] = point{t: p.Timestamp.Time(), v: float64(p.Value)}
			}
			out = append(out, series{labels: labelsOf(s.Metric), points: ps})
		}
		return out
	}
	return nil
}

func labelsOf(m model.Metric) labels.Labels {
	b := labels.NewScratchBuilder(len(m))
	for k, v := range m {
		b.Add(string(k), string(v))
	}
	b.Sort()
	return b.Labels()
}
