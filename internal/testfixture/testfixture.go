// Package testfixture holds the fixtures that tests of several packages share:
// the repository's captured inputs (testdata/samples, testdata/hazards), scripted
// engines, and stand-ins started on loopback. Only tests import it. One copy of
// each fixture lives here, so a fix to a fixture reaches every test that uses it.
package testfixture

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Root returns the repository's root: the nearest directory above the test's
// working directory (its package directory) that holds the adapter's go.mod and
// testdata/. The test fails when there is none.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "testdata", "samples")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no repository root (go.mod beside testdata/samples) above the working directory")
		}
		dir = parent
	}
}

// Read returns the file at rel under the repository's root, e.g.
// "testdata/samples/vllm_v1-0.10-nvcr25.09_single-engine.prom".
func Read(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Sample returns a real /metrics body of testdata/samples (each file's source is
// in testdata/samples/SOURCE.md): e.g. the idle vLLM V1 dump
// "vllm_v1-0.10-nvcr25.09_single-engine.prom" (0 running, 0 waiting) or
// llm-d-inference-sim under load "llm-d-inference-sim_v0.10.2_load.prom" (2
// running, 4 waiting).
func Sample(t testing.TB, name string) []byte {
	t.Helper()
	return Read(t, filepath.Join("testdata", "samples", name))
}

// Hazard returns an input of testdata/hazards: a case that broke another adapter
// or scaler (testdata/hazards/README.md says what each one is).
func Hazard(t testing.TB, name string) []byte {
	t.Helper()
	return Read(t, filepath.Join("testdata", "hazards", name))
}

// Response is one scripted HTTP answer.
type Response struct {
	Status int
	Body   []byte
}

// Scripted is an http.Handler that answers the n-th request with Script[n],
// repeating the last response once the script is used up. It is safe for
// concurrent use.
type Scripted struct {
	Script []Response

	mu   sync.Mutex
	gets int
}

// ServeHTTP answers the next response of the script.
func (s *Scripted) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	r := s.Script[min(s.gets, len(s.Script)-1)]
	s.gets++
	s.mu.Unlock()
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}

// Count returns the requests answered so far.
func (s *Scripted) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// Bodies returns every captured /metrics body of testdata/samples and
// testdata/hazards (*.prom), by file name, for tests and fuzz seeds that must
// hold for all of them.
func Bodies(t testing.TB) map[string][]byte {
	t.Helper()
	root := Root(t)
	out := map[string][]byte{}
	for _, dir := range []string{"samples", "hazards"} {
		files, err := filepath.Glob(filepath.Join(root, "testdata", dir, "*.prom"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(p)] = b
		}
	}
	if len(out) == 0 {
		t.Fatal("no .prom file under testdata/samples and testdata/hazards")
	}
	return out
}
