package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// cachingAuthorizer stands in for delegated authorization: it allows every
// request and, as the webhook authorizer does (k8s.io/apiserver
// plugin/pkg/authorizer/webhook: an LRU of 8,192 SubjectAccessReviews keyed
// by their JSON), keeps every distinct decision it made, selector included.
// It records the longest label selector it was asked about.
type cachingAuthorizer struct {
	mu      sync.Mutex
	cache   map[string]bool
	longest int
}

func (a *cachingAuthorizer) Authorize(_ context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	sel, _ := attr.GetLabelSelector()
	key, _ := json.Marshal(struct {
		Path, Verb string
		Selector   string
	}{attr.GetPath(), attr.GetVerb(), fmt.Sprint(sel)})
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) < 8192 {
		a.cache[string(key)] = true
	}
	a.longest = max(a.longest, len(fmt.Sprint(sel)))
	return authorizer.DecisionAllow, "", nil
}

// longSelector returns a valid label selector of about n bytes, distinct for
// each i: a set of 60-byte values (a label value may hold 63).
func longSelector(i, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "app=vllm,tenant notin (v%d", i)
	for b.Len()+62 < n {
		b.WriteString(",")
		b.WriteString(strings.Repeat("x", 56))
		fmt.Fprintf(&b, "%04d", b.Len()%10000)
	}
	b.WriteString(")")
	return b.String()
}

// Issue 20: delegated authorization put the request's label selector in each
// SubjectAccessReview and cached each distinct one: 3,000 distinct 90 KB
// selectors from one tenant held 243 MB there. Through the assembled server's
// real handler chain, a selector above --max-selector-bytes is refused (400)
// before authorization, and a tenant sending 90 KB selectors does not grow
// the heap; selectors within the limit are answered as before. The control:
// with the limit raised to 1 MiB, the same requests reach the authorizer,
// whose cache grows with them.
func TestLongSelectorsRefusedBeforeAuthorization(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const n = 300 // distinct 90 KB selectors: 27 MB
	run := func(t *testing.T, limit int) (grew int64, authz *cachingAuthorizer, codes map[int]int) {
		authz = &cachingAuthorizer{cache: map[string]bool{}}
		a := startAdapterWith(t, func(o *Options) { o.MaxSelectorBytes = limit },
			func(c *Config) { c.Generic.Authorization.Authorizer = authorizer.AuthorizerFunc(authz.Authorize) },
			filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom"))
		a.waitReady(t)
		if got := a.value(t, "llm_saturation"); got == "" {
			t.Fatal("no value for a short selector")
		}
		codes = map[int]int{}
		send := func(count, from int) {
			for i := range count {
				code, _ := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?labelSelector="+url.QueryEscape(longSelector(from+i, 90<<10)))
				codes[code]++
			}
		}
		send(20, 0) // warm up connections and pools
		before := heap()
		send(n, 1000)
		return int64(heap()) - int64(before), authz, codes
	}

	t.Run("refused", func(t *testing.T) {
		grew, authz, codes := run(t, DefaultMaxSelectorBytes)
		t.Logf("heap after %d distinct 90 KB selectors: %+d bytes; answers %v", n, grew, codes)
		if codes[http.StatusBadRequest] != n+20 {
			t.Errorf("answers %v, want all %d refused (400)", codes, n+20)
		}
		if grew > 8<<20 {
			t.Errorf("the heap grew by %d bytes over %d refused 90 KB selectors, want under 8 MiB", grew, n)
		}
		authz.mu.Lock()
		defer authz.mu.Unlock()
		if authz.longest > DefaultMaxSelectorBytes {
			t.Errorf("the authorizer saw a selector of %d bytes, above the limit %d", authz.longest, DefaultMaxSelectorBytes)
		}
	})
	t.Run("control: without the limit the authorizer's cache grows", func(t *testing.T) {
		grew, authz, codes := run(t, 1<<20)
		t.Logf("heap after %d distinct 90 KB selectors: %+d bytes; answers %v", n, grew, codes)
		authz.mu.Lock()
		defer authz.mu.Unlock()
		if authz.longest < 80<<10 || grew < 20<<20 {
			t.Errorf("the control saw selectors of %d bytes and grew %d bytes: the test does not measure what it should", authz.longest, grew)
		}
	})
	t.Run("at the limit", func(t *testing.T) {
		authz := &cachingAuthorizer{cache: map[string]bool{}}
		a := startAdapterWith(t, nil, func(c *Config) { c.Generic.Authorization.Authorizer = authorizer.AuthorizerFunc(authz.Authorize) },
			filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom"))
		a.waitReady(t)
		sel := longSelector(1, DefaultMaxSelectorBytes)
		if len(sel) > DefaultMaxSelectorBytes || len(sel) < DefaultMaxSelectorBytes-64 {
			t.Fatalf("selector of %d bytes", len(sel))
		}
		if code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?labelSelector="+url.QueryEscape(sel)); code != http.StatusOK {
			t.Errorf("a valid selector of %d bytes: HTTP %d %.300s, want it answered", len(sel), code, body)
		}
		// Past the limit with a malformed pair beside it: still refused, and the
		// authorizer never sees it.
		long := longSelector(2, 3*DefaultMaxSelectorBytes)
		for _, junk := range []string{"&%zz", "&a=b;c"} {
			if code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?labelSelector="+url.QueryEscape(long)+junk); code != http.StatusBadRequest {
				t.Errorf("a %d-byte selector with %q beside it: HTTP %d %.200s, want 400", len(long), junk, code, body)
			}
		}
		authz.mu.Lock()
		defer authz.mu.Unlock()
		if authz.longest > DefaultMaxSelectorBytes {
			t.Errorf("the authorizer saw a selector of %d bytes, above the limit %d", authz.longest, DefaultMaxSelectorBytes)
		}
	})
}

func TestSelectorTooLong(t *testing.T) {
	for _, tt := range []struct {
		query string
		want  string
	}{
		{"labelSelector=app%3Dx", ""},
		{"labelSelector=" + strings.Repeat("a", 100), ""},
		{"labelSelector=" + strings.Repeat("a", 101), "labelSelector is 101 bytes long"},
		{"fieldSelector=" + strings.Repeat("a", 101), "fieldSelector is 101 bytes long"},
		{"labelSelector=" + strings.Repeat("%41", 100), ""}, // 300 bytes encoded, 100 decoded
		{"labelSelector=" + strings.Repeat("a", 5000), "the query string is 5014 bytes long"},
		{"other=" + strings.Repeat("a", 200), ""},
		// A malformed pair beside it (url.ParseQuery fails; the chain's
		// URL.Query still reads the selector) once let a long one by.
		{"labelSelector=" + strings.Repeat("a", 101) + "&%zz", "labelSelector is 101 bytes long"},
		{"labelSelector=" + strings.Repeat("a", 101) + "&a=b;c", "labelSelector is 101 bytes long"},
		{"%zz&fieldSelector=" + strings.Repeat("a", 101), "fieldSelector is 101 bytes long"},
	} {
		if got := selectorTooLong(tt.query, 100); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("selectorTooLong(%.40s…) = %q, want %q", tt.query, got, tt.want)
		}
	}
}

// An External metric is its pool's value: a field selector (kubectl get --raw
// ...?fieldSelector=metadata.name=vllm-0) was ignored and the pool's value came
// back as if it were that pod's. It is refused, naming where one pod's value is;
// the per-pod custom metrics API still takes it.
func TestExternalMetricRefusesFieldSelector(t *testing.T) {
	a := startAdapterWith(t, nil, nil, filepath.Join("..", "..", "..", "testdata", "hazards", "BC-06.prom"))
	a.waitReady(t)
	code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?fieldSelector="+url.QueryEscape("metadata.name=vllm-0"))
	if code != http.StatusBadRequest || !strings.Contains(string(body), "takes no field selector") || !strings.Contains(string(body), "custom.metrics.k8s.io") {
		t.Errorf("External with a field selector: HTTP %d %.300s, want 400 saying it takes none", code, body)
	}
	if code, body := a.get(t, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/llm_saturation?fieldSelector="); code != http.StatusOK {
		t.Errorf("External with an empty field selector: HTTP %d %.300s, want it answered", code, body)
	}
}
