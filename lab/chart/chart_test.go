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

// The additions for charts that mark their parts: groups with a class and a
// name, shaded rectangles and coloured text; Frac places a value on an axis.
func TestGroupsRectsAndFrac(t *testing.T) {
	var b bytes.Buffer
	c := New(&b, 400, 300, "t")
	c.Rect(10, 20, 30.25, 40, "#fdf1dc")
	c.Group("series", `a "b"`)
	p := c.Panel(50, 40, 300, 200, "panel", Axis{Max: 10}, Axis{Max: 4}, nil)
	p.Line([]float64{0, 10}, []float64{1, 2}, Style{Color: Color(0)})
	c.EndGroup()
	c.Group("ref", "")
	c.ColorText(5, 6, "end", "x<y", "#555")
	c.EndGroup()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var root struct{ XMLName xml.Name }
	if err := xml.Unmarshal(b.Bytes(), &root); err != nil {
		t.Fatalf("not SVG: %v\n%s", err, b.String())
	}
	for _, want := range []string{
		`<rect x="10.0" y="20.0" width="30.2" height="40.0" fill="#fdf1dc"/>`,
		`<g class="series" data-name="a &quot;b&quot;">`,
		`<g class="ref">`,
		`<text x="5.0" y="6.0" text-anchor="end" fill="#555">x&lt;y</text>`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("chart lacks %s", want)
		}
	}
	if n := strings.Count(b.String(), "</g>"); n != 2 {
		t.Errorf("%d groups closed, want 2", n)
	}
	a := Axis{Min: 10, Max: 20}
	for v, want := range map[float64]float64{10: 0, 15: 0.5, 20: 1, 5: 0, 25: 1} {
		if got := a.Frac(v); got != want {
			t.Errorf("Frac(%g) = %g, want %g", v, got, want)
		}
	}
	if got := (Axis{Min: 3, Max: 3}).Frac(3); got != 0 {
		t.Errorf("Frac on an empty axis = %g, want 0", got)
	}
}
