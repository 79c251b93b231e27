package metricdocs

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// Check fails t unless every family g gathers has help text and is in the
// documented table (read from root + Doc; root is the path from the test's
// directory to the repository's root, e.g. "../../") with its type, its label
// names and, for labels not named in open, exactly the documented values; and
// unless g gathers exactly families families. Labels in open take the
// operator's names (a namespace, an HPA), so their values are not compared.
// The caller first sets a series for every fixed label value it registers.
func Check(t testing.TB, g prometheus.Gatherer, root string, families int, open ...string) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no help text", f.GetName())
		}
	}
	documented, err := Read(root + Doc)
	if err != nil {
		t.Fatal(err)
	}
	got := FromFamilies(fams, open...)
	want := map[string]Metric{}
	for name := range got {
		want[name] = documented[name]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("documented metric table and the registry differ (-documented +registry):\n%s", diff)
	}
	if len(got) != families {
		t.Errorf("gathered %d metric families, want %d", len(got), families)
	}
}
