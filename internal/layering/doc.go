// Package layering holds the test that keeps the module's packages where they
// belong: every package has a layer (an unplaced one fails), the server wing
// follows its data flow (pods → scrape or Prometheus → signals → pool →
// provider → HPA) with nothing reaching backwards, the server and lab wings
// never import each other, and the drain binary stays small.
package layering
