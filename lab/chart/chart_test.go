package chart

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
)

// A chart is well-formed SVG, escapes its text, and depends only on the calls.
func TestChart(t *testing.T) {
	draw := func() []byte {
		var b bytes.Buffer
		c := New(&b, 400, 300, `load & "replicas" <x>`)
		p := c.Panel(50, 40, 300, 200, "panel", Axis{Max: 10, Label: "t"}, Axis{Max: NiceCeil(7.3)}, &Axis{Max: 4, Color: "#9467bd"})
		p.Line([]float64{0, 5, 10}, []float64{1, 3, 2}, Style{Color: Color(0), Step: true, Markers: true})
		p.Line([]float64{0, 10}, []float64{2, 4}, Style{Color: Color(1), Right: true, Dashed: true})
		p.Range(5, 3, 4, 6, 2, 4, Color(2))
		p.HLine(5, "goal", "#444")
		p.VLine(5, "cost", "#444")
		p.Label(5, 3, "tuned", Color(0))
		p.Legend("ready", Color(0))
		p.XTicks()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := draw(), draw()
	if !bytes.Equal(a, b) {
		t.Error("two identical charts differ")
	}
	var root struct{ XMLName xml.Name }
	if err := xml.Unmarshal(a, &root); err != nil || root.XMLName.Local != "svg" {
		t.Fatalf("not SVG: %v", err)
	}
	if !strings.Contains(string(a), "load &amp; &quot;replicas&quot; &lt;x&gt;") {
		t.Error("the title is not escaped")
	}
	if NiceCeil(7.3) != 10 || NiceCeil(0) != 1 || NiceCeil(2.1) != 2.5 {
		t.Errorf("NiceCeil: %g %g %g", NiceCeil(7.3), NiceCeil(0), NiceCeil(2.1))
	}
}
