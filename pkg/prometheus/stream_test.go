package prometheus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/saturation-adapter/saturation-adapter/pkg/history"
	"github.com/saturation-adapter/saturation-adapter/pkg/policy"
	"github.com/saturation-adapter/saturation-adapter/pkg/signals"
)

// normalized is a series as both decoders should see it: labels and points
// sorted by time, one per time (the last given). Points at time 0 are left
// out: Decode reads a vector sample without a value as 0 at time 0 (the zero
// model.Sample), which the stream decoder rightly does not make up; a series
// with no point left is left out.
func normalized(ss []series) []string {
	var out []string
	for _, s := range ss {
		pts := slices.DeleteFunc(newest(slices.Clone(s.points), 0), func(p point) bool { return p.t.UnixMilli() == 0 })
		if len(pts) == 0 {
			continue
		}
		var b strings.Builder
		b.WriteString(s.labels.String())
		for _, p := range pts {
			fmt.Fprintf(&b, " %d=%x", p.t.UnixMilli(), math.Float64bits(p.v))
		}
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out
}

// FuzzDecodeStream: the streaming decoder the Source reads Prometheus with
// never panics, fails only with ErrResponse or a *QueryError, and, where the
// whole-body reference decoder (Decode, encoding/json into
// prometheus/common/model's types) reads the same body, keeps the same
// series with the same points. Its series build into valid histories.
func FuzzDecodeStream(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "hazards", "*.json"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "prometheus", "*.json"))
	for _, p := range append(files, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"vllm:num_requests_waiting","namespace":"n","pod":"p","engine":"0","engine":"1"},"values":[[2,"3"],[1,"NaN"],[2,"4"]],"histograms":[[1,{}]]}]}}`))
	f.Add([]byte(`{"status":"error","errorType":"execution","error":"too many samples"}`))
	f.Add([]byte(`{"data":{"result":[],"resultType":"vector"},"status":"success","warnings":["x"]}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"\u0062"},"value":[1.5,"+Inf"],"values":[[1,"2"]]}]}}`))
	f.Add([]byte(`{"Status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"Values":[[1,"2"]],"values":[[2,"3"]]}],"Result":[]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := decodeStream(bytes.NewReader(body), decodeLimits{}, nil)
		if err != nil {
			var qerr *QueryError
			if !errors.Is(err, ErrResponse) && !errors.As(err, &qerr) {
				t.Fatalf("error %v is neither ErrResponse nor a QueryError", err)
			}
		}
		if v, derr := Decode(body); derr == nil && err == nil {
			want, got := normalized(seriesOf(v)), normalized(a.series)
			if !slices.Equal(want, got) {
				t.Fatalf("the stream decoder's series differ from Decode's:\nDecode: %q\nstream: %q", want, got)
			}
		}
		if err == nil {
			checkSeriesBuild(t, a.series)
		}
	})
}

// TestStreamKeysAsDecode: the stream decoder matches an object's keys as
// encoding/json (Decode's path) does, exactly or else by case folding, so an
// answer with keys in another letter case reads the same either way; and a key
// that carries the result given twice, which Decode would resolve by keeping
// the last (or merging), is refused. Found by FuzzDecodeStream.
func TestStreamKeysAsDecode(t *testing.T) {
	series := func(v string) string {
		return `{"metric":{"pod":"p"},"value":[1767225600,"` + v + `"]}`
	}
	for _, body := range []string{
		`{"Status":"success","DATA":{"ResultType":"vector","Result":[{"Metric":{"pod":"p"},"VALUE":[1767225600,"2"]}]}}`,
		`{"\u017ftatus":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"p"},"valueS":[[1767225600,"2"]]}]}}`,
		`{"\u0073tatus":"success","data":{"resultType":"vector","result":[` + series("3") + `]}}`,
		`{"status":"error","Status":"success","data":{"resultType":"vector","result":[` + series("4") + `]}}`,
	} {
		a, err := decodeStream(strings.NewReader(body), decodeLimits{}, nil)
		v, derr := Decode([]byte(body))
		if err != nil || derr != nil {
			t.Fatalf("%s: stream: %v, Decode: %v; want both to read it", body, err, derr)
		}
		if want, got := normalized(seriesOf(v)), normalized(a.series); len(got) != 1 || !slices.Equal(want, got) {
			t.Errorf("%s: stream %q, Decode %q", body, got, want)
		}
	}
	for _, tc := range []struct{ body, key string }{
		{`{"status":"success","data":{"resultType":"vector","result":[` + series("1") + `]},"Data":{"resultType":"vector","result":[]}}`, "data"},
		{`{"status":"success","data":{"resultType":"vector","result":[` + series("1") + `],"result":[` + series("2") + `]}}`, "result"},
		{`{"status":"success","data":{"resultType":"vector","result":[` + series("1") + `],"RESULT":[]}}`, "result"},
		{`{"status":"success","data":{"resultType":"vector","result":[],"resultType":"matrix"}}`, "resultType"},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"p"},"value":[1,"2"],"Value":[2,"5"]}]}}`, "value"},
		{`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"pod":"p"},"values":[[1,"2"]],"values":[[2,"2"]]}]}}`, "values"},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"p"},"Metric":{"x":"y"},"value":[1,"2"]}]}}`, "metric"},
	} {
		_, err := decodeStream(strings.NewReader(tc.body), decodeLimits{}, nil)
		if !errors.Is(err, ErrResponse) || !strings.Contains(err.Error(), fmt.Sprintf("%q given twice", tc.key)) {
			t.Errorf("%s: error %v; want ErrResponse naming %q given twice", tc.body, err, tc.key)
		}
	}
}

// checkSeriesBuild builds every pod's series into a history, as the Source
// does, and checks it (checkHistory).
func checkSeriesBuild(t *testing.T, ss []series) {
	t.Helper()
	pods := map[types.NamespacedName]*podData{}
	byPod(pods, ss, DefaultLabels(), "", "", 0)
	o := newBuildOptions(signals.NewExtractor(), history.HistoryOptions{}, []history.WindowKey{{Window: time.Minute}}, 15*time.Second)
	o.now = time.Unix(1767225600, 0)
	for _, d := range pods {
		if h, err := build(d, o); err == nil {
			checkHistory(t, h)
		}
	}
}

// Issue 20: a 60 MB answer under the then 64 MiB limit held the adapter at
// 504–517 MiB while client_golang read it whole and decoded it into maps.
// The stream decoder holds the series it keeps and a 32 KiB buffer: reading
// a 60 MB answer of a namespace's series allocates a small multiple of what
// it keeps, and an answer of other namespaces' series (the join drops them)
// or of a family not read allocates almost nothing that stays.
func TestLargeAnswerStreams(t *testing.T) {
	kept := func(l seriesLabels) bool { return l.Get("namespace") == "llm" }
	for _, tc := range []struct {
		name      string
		namespace string
		maxKeep   uint64 // bytes the decoder may hold at the end
	}{
		{"series of another namespace", "other", 1 << 20},
		{"series of the namespace", "llm", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bigMatrix(tc.namespace, 60<<20)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			a, err := decodeStream(bytes.NewReader(body), decodeLimits{maxPoints: maxPointsPerSeries}, kept)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			runtime.GC()
			var held runtime.MemStats
			runtime.ReadMemStats(&held)
			heldBytes := int64(held.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d-byte answer: %d series kept (%d bytes charged), %d bytes allocated while decoding, %d held after",
				len(body), len(a.series), a.bytes, allocated, heldBytes)
			// The whole-body path (client_golang: the body read whole, then
			// decoded into model.Matrix, then copied into series) allocated
			// 1.08 GB and held 222 MB for this answer, all alive at once.
			// Streamed, what is allocated beyond what is kept is garbage of
			// one series at a time, and what is held is what is kept.
			if allocated > 6*uint64(len(body)) {
				t.Errorf("decoding a %d-byte answer allocated %d bytes, want under 6 times the answer (the old path: 17)", len(body), allocated)
			}
			if tc.maxKeep > 0 && (heldBytes > int64(tc.maxKeep) || len(a.series) != 0) {
				t.Errorf("an answer of another namespace: %d series kept, %d bytes held", len(a.series), heldBytes)
			}
			if tc.maxKeep == 0 && heldBytes > a.bytes+(4<<20) {
				t.Errorf("%d bytes held after decoding, for %d charged: the charge misses what is held", heldBytes, a.bytes)
			}
			runtime.KeepAlive(a)
			runtime.KeepAlive(body)
		})
	}
}

// bigMatrix returns a matrix answer of about n bytes: vLLM queue series of
// pods of namespace, three points each.
func bigMatrix(namespace string, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"metric":{"__name__":"vllm:num_requests_waiting","namespace":%q,"pod":"vllm-%06d","engine":"0","job":"llm/vllm","instance":"10.0.%d.%d:8000","model_name":"qwen"},"values":[[1767225570,"3"],[1767225585,"4"],[1767225600,"5"]]}`,
			namespace, i, i/256%256, i%256)
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

// The Source bounds what it reads of Prometheus: an answer above
// --prometheus-max-response-bytes fails while it streams (the heap does not
// grow with it), and the answers held at once are bounded (heldAnswersFactor
// × the response limit): past it a namespace's query fails with a message,
// the HPA holds, and the bytes come back when the answer is let go.
func TestSourceBoundsAnswers(t *testing.T) {
	body := bigMatrix("llm", 60<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.FormValue("query"), "increase(") {
			io.WriteString(w, emptyVector)
			return
		}
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Run("the response limit", func(t *testing.T) {
		c, err := NewClient(ClientOptions{URL: srv.URL, MaxResponseBytes: DefaultMaxResponseBytes})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = c.query(context.Background(), "x", time.Now(), 0, decodeLimits{}, func(seriesLabels) bool { return true })
		runtime.ReadMemStats(&after)
		if !errors.Is(err, errTooLarge) || reasonOf(err) != ReasonResponse {
			t.Fatalf("a 60 MB answer: %v, want it refused as too large (reason response)", err)
		}
		runtime.GC()
		var held runtime.MemStats
		runtime.ReadMemStats(&held)
		if grew := int64(held.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
			t.Errorf("refusing a 60 MB answer at the %d-byte limit left %d bytes held", DefaultMaxResponseBytes, grew)
		}
		// Decoding allocates about 3.4 bytes of garbage per byte read (more under
		// -race); the whole 60 MB answer would be over 200 MB.
		if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 8*DefaultMaxResponseBytes {
			t.Errorf("refusing a 60 MB answer at the %d-byte limit allocated %d bytes: it is read past the limit", DefaultMaxResponseBytes, allocated)
		}
	})
	t.Run("the answers held", func(t *testing.T) {
		prom := &fakeProm{srv: srv}
		// A minute for the queries, not the fixture's 2 s: decoding 8 MiB under
		// -race on a busy machine once took longer, and the deadline answered
		// first. What is checked is the bound, not the time.
		f := newFixture(t, prom, fixtureOptions{opts: Options{MaxHeldBytes: 8 << 20, Timeout: time.Minute}}, pod{name: "vllm-000001", labels: map[string]string{"app": "x"}})
		// The fixture's client allows the default 16 MiB: the limit on held
		// bytes (8 MiB here) refuses the answer first.
		f.source.client.max = 64 << 20
		r := f.get(t, "llm", policy.MetricSaturation, "app=x")
		if r.code != http.StatusServiceUnavailable || !strings.Contains(r.status.Message, "answers held at once would exceed their bound") {
			t.Errorf("HTTP %d %q, want 503 naming the bound", r.code, r.status.Message)
		}
		if held := f.source.held.Load(); held != 0 {
			t.Errorf("%d bytes still charged after the failed fetch, want 0", held)
		}
	})
}
