package svgdoc

import (
	"encoding/xml"
	"strings"
	"testing"
)

// The opening, closed by the caller, is a well-formed SVG document whose
// size, viewBox and title are those given.
func TestBegin(t *testing.T) {
	var b strings.Builder
	Begin(&b, 300, 200, "a &amp; b")
	b.WriteString("</svg>\n")
	var doc struct {
		XMLName xml.Name `xml:"svg"`
		Width   string   `xml:"width,attr"`
		Height  string   `xml:"height,attr"`
		ViewBox string   `xml:"viewBox,attr"`
		Title   string   `xml:"title"`
	}
	if err := xml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	if doc.Width != "300" || doc.Height != "200" || doc.ViewBox != "0 0 300 200" || doc.Title != "a & b" {
		t.Errorf("got %+v", doc)
	}
	if !strings.Contains(b.String(), `x="150" y="28"`) {
		t.Errorf("the title is not centred:\n%s", b.String())
	}
}
