// Package excerpt turns untrusted text (what a pod sent, what a request asked
// for) into a short excerpt that is safe to put into an error message, a log
// line or an API status: printable, valid UTF-8, and bounded in bytes.
package excerpt

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Ellipsis ends an excerpt that was cut.
const Ellipsis = "…"

// String returns s with every rune that is not printable (control characters,
// line breaks, invalid UTF-8) replaced by '?' and, when s is longer than
// maxBytes bytes, cut at a rune boundary so that it ends with Ellipsis within
// maxBytes. It reads no more of s than it keeps, so its cost does not grow
// with s.
func String(s string, maxBytes int) string {
	maxBytes = max(maxBytes, len(Ellipsis))
	cut := len(s) > maxBytes
	if !cut && clean(s) {
		return s
	}
	limit := len(s)
	if cut {
		limit = maxBytes - len(Ellipsis)
	}
	var b strings.Builder
	b.Grow(min(len(s), maxBytes))
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			break
		}
		b.WriteRune(r)
	}
	if cut {
		b.WriteString(Ellipsis)
	}
	return b.String()
}

func clean(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
