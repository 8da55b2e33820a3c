// Package svgdoc writes the opening of the SVG reports gorun draws
// (gorun bench --svg, gorun check --net --svg), so that they share one
// look: the size, the font, a white page and a centred title.
package svgdoc

import (
	"fmt"
	"io"
)

// Begin writes the XML declaration, the <svg> element of width by height
// pixels, its <title> and a white background with title centred on top.
// title is XML text already escaped. The caller ends the document with
// "</svg>".
func Begin(w io.Writer, width, height int, title string) {
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<title>%s</title>
<rect x="0" y="0" width="%d" height="%d" fill="white"/>
<text class="title" x="%d" y="28" text-anchor="middle" font-size="16">%s</text>
`, width, height, width, height, title, width, height, width/2, title)
}
