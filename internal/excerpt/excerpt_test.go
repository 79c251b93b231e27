package excerpt

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{name: "short and clean", in: "HTTP 500", max: 16, want: "HTTP 500"},
		{name: "exactly max", in: "abcd", max: 4, want: "abcd"},
		{name: "cut with ellipsis", in: "abcdefghij", max: 6, want: "abc…"},
		{name: "control characters", in: "a\nb\tc\x00d", max: 16, want: "a?b?c?d"},
		{name: "invalid UTF-8", in: "ok\xff\xfe!", max: 16, want: "ok??!"},
		{name: "cut never splits a rune", in: "ééééé", max: 6, want: "é…"},
		{name: "escape sequence", in: "\x1b[31mred", max: 16, want: "?[31mred"},
		{name: "max below the ellipsis", in: "abcdef", max: 1, want: "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in, tt.max); got != tt.want {
				t.Errorf("String(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

// Hostile inputs: whatever comes in, what goes out is printable UTF-8 within
// the bound.
func TestStringHostile(t *testing.T) {
	inputs := map[string]string{
		"1 MB label value":   strings.Repeat("x", 1<<20),
		"4 MB invalid UTF-8": strings.Repeat("\xff\xc3", 2<<20),
		"emoji":              strings.Repeat("🔥", 1000),
		"zero-width":         strings.Repeat("\u200b", 1000),
	}
	for name, in := range inputs {
		for _, max := range []int{16, 200, 1024} {
			got := String(in, max)
			if len(got) > max || !utf8.ValidString(got) {
				t.Errorf("%s, max %d: %d bytes, valid UTF-8 %v", name, max, len(got), utf8.ValidString(got))
			}
			for _, r := range got {
				if !unicode.IsPrint(r) {
					t.Errorf("%s: unprintable %U kept", name, r)
					break
				}
			}
		}
	}
}
