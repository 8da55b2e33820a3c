// Package plural counts things in gorun's messages: "1 rank", "16 ranks".
package plural

import "strconv"

// Of says n of noun, whose plural takes an s: "1 rank", "0 hosts",
// "16 ranks".
func Of(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
