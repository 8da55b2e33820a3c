package plural_test

import (
	"fmt"

	"github.com/gorun/gorun/internal/plural"
)

func ExampleOf() {
	fmt.Println(plural.Of(1, "rank"))
	fmt.Println(plural.Of(16, "rank"))
	fmt.Println(plural.Of(0, "host"))
	// Output:
	// 1 rank
	// 16 ranks
	// 0 hosts
}
