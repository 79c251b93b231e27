// Package layering holds a test that keeps the adapter's packages in the order
// of its data flow, pods and HPAs → scrape → signals → provider → HPA, with
// nothing reaching backwards (the README's architecture table).
package layering
