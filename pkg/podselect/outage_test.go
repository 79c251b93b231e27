package podselect_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/saturation-adapter/saturation-adapter/pkg/podselect"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Issue 12, faults 6: an API server outage must be visible at the default log
// level. client-go's reflectors retry a refused watch at -v=4 only.
func TestOutageReporter(t *testing.T) {
	refused := &dialError{err: syscall.ECONNREFUSED}
	type step struct {
		after time.Duration
		code  int   // 0: the transport fails with err
		err   error // with code 0
		ctx   bool  // the caller cancelled
	}
	tests := []struct {
		name  string
		steps []step
		want  []string // levels and messages logged, in order
	}{
		{name: "healthy", steps: []step{{code: 200}, {after: time.Hour, code: 200}}, want: nil},
		{
			name: "outage and recovery",
			steps: []step{
				{code: 200}, {after: time.Second, err: refused}, {after: 10 * time.Second, err: refused},
				{after: time.Minute, err: refused}, {after: time.Second, code: 200}, {after: time.Second, code: 200},
			},
			want: []string{
				"error: Kubernetes API server unreachable: pod and HPA caches are not updated until it answers again",
				"error: Kubernetes API server still unreachable",
				"info: Kubernetes API server answers again",
			},
		},
		{
			name:  "503 while shutting down",
			steps: []step{{code: http.StatusServiceUnavailable}, {code: 200}},
			want:  []string{"error: Kubernetes API server unreachable: pod and HPA caches are not updated until it answers again", "info: Kubernetes API server answers again"},
		},
		{name: "404 is an answer", steps: []step{{code: http.StatusNotFound}}, want: nil},
		{name: "the caller's cancellation is not an outage", steps: []step{{err: context.Canceled, ctx: true}}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				mu  sync.Mutex
				got []string
			)
			logger := funcr.New(func(_, args string) {
				mu.Lock()
				defer mu.Unlock()
				level := "info"
				if strings.Contains(args, `"error"=`) {
					level = "error"
				}
				msg := args[strings.Index(args, `"msg"="`)+7:]
				got = append(got, level+": "+msg[:strings.Index(msg, `"`)])
			}, funcr.Options{})
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
			var current step
			o := podselect.NewOutageReporter(roundTripFunc(func(*http.Request) (*http.Response, error) {
				if current.code == 0 {
					return nil, current.err
				}
				return &http.Response{StatusCode: current.code, Status: http.StatusText(current.code), Body: http.NoBody}, nil
			}), clk, logger)
			for _, s := range tt.steps {
				clk.SetTime(clk.Now().Add(s.after))
				current = s
				ctx, cancel := context.WithCancel(context.Background())
				if s.ctx {
					cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://10.96.0.1/api/v1/pods?watch=true", nil)
				resp, err := o.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
				}
				cancel()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("logged (-want +got):\n%s", diff)
			}
		})
	}
}

// dialError is a refused connection as the dialer reports it.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial tcp 10.96.0.1:443: connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }
