package manifests

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAlertsDocumented: docs/operations.md's alert table lists every alert the
// monitoring install ships, each with its `for`, and no other.
func TestAlertsDocumented(t *testing.T) {
	pr := only[*prometheusRule](t, decodeFile(t, monitoringPath), adapterName)
	shipped := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				shipped[r.Alert] = r.For
			}
		}
	}
	documented := map[string]string{}
	for _, row := range docTable(t, "docs/operations.md", "## Monitoring") {
		if len(row) != 3 {
			t.Fatalf("docs/operations.md alert row %q: want | alert | fires when | for |", row)
		}
		documented[row[0]] = row[2]
	}
	if diff := cmp.Diff(shipped, documented); diff != "" {
		t.Errorf("alerts and their for (-shipped +docs/operations.md):\n%s", diff)
	}
}
