package prometheus

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// ErrResponse: a Prometheus answer that is not a query result the adapter can
// read (not JSON, an error status, a result type other than vector or
// matrix).
var ErrResponse = errors.New("unusable Prometheus response")

// response is the envelope of the Prometheus HTTP API
// (https://prometheus.io/docs/prometheus/latest/querying/api/#format-overview).
type response struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// Decode reads a saved instant-query response, the JSON body Prometheus's
// /api/v1/query returns: a vector (one sample per series) or a matrix (a range
// selector's raw samples with their own timestamps). It decodes the result with
// prometheus/common/model's own types, as the client the server queries with
// does. Errors wrap ErrResponse and say what is wrong.
func Decode(body []byte) (model.Value, error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: not a Prometheus API response: %s", ErrResponse, signals.Excerpt(err.Error(), 200))
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%w: status %q: %s: %s", ErrResponse, signals.Excerpt(r.Status, 40),
			signals.Excerpt(r.ErrorType, 40), signals.Excerpt(r.Error, 300))
	}
	var data struct {
		Type   model.ValueType `json:"resultType"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return nil, fmt.Errorf("%w: data: %s", ErrResponse, signals.Excerpt(err.Error(), 200))
	}
	switch data.Type {
	case model.ValVector:
		var v model.Vector
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, fmt.Errorf("%w: vector: %s", ErrResponse, signals.Excerpt(err.Error(), 200))
		}
		return v, nil
	case model.ValMatrix:
		var m model.Matrix
		if err := json.Unmarshal(data.Result, &m); err != nil {
			return nil, fmt.Errorf("%w: matrix: %s", ErrResponse, signals.Excerpt(err.Error(), 200))
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: result type %q; want vector or matrix (an instant query, of a series selector or a range selector)",
		ErrResponse, signals.Excerpt(data.Type.String(), 40))
}

// point is one sample of a series.
type point struct {
	t time.Time
	v float64
}

// series is one series of an answer with its samples, oldest first.
type series struct {
	labels labels.Labels
	points []point
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
