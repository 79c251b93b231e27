package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"
)

func httpGet(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// processAlive reports whether a process with this id still exists (and is not a zombie
// we already reaped).
func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// setMetricsFault switches an emulated engine's /metrics between failing (HTTP 500) and
// healthy through the emulator's fault switch.
func setMetricsFault(t *testing.T, endpoint string, on bool) {
	t.Helper()
	mode := "none"
	if on {
		mode = "metrics-500"
	}
	resp, err := http.Post(endpoint+"/admin/fault?mode="+mode, "text/plain", nil)
	if err != nil {
		t.Fatalf("setting fault %s on %s: %v", mode, endpoint, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("setting fault %s on %s: %s", mode, endpoint, resp.Status)
	}
}
