package config_test

import (
	"fmt"
	"os"

	"github.com/gorun/gorun/config"
)

func Example() {
	schema := config.Schema{
		{Name: "np", Kind: config.Int, Default: "1", Usage: "number of processes"},
		{Name: "tag-output", Kind: config.Bool, Default: "false", Usage: "prefix output with the rank"},
		{Name: "grace-period", Kind: config.Duration, Default: "5s", Usage: "time between SIGTERM and SIGKILL"},
		{Name: "x", Kind: config.StringList, Usage: "environment variables to export"},
	}
	environ := []string{"GORUN_X=FOO,BAR=1", "GORUN_RANK=0"}
	flags := map[string][]string{"np": {"8"}}

	c, err := config.Load(schema, []string{"testdata/example.toml"}, environ, flags)
	if err != nil {
		fmt.Println(err)
		return
	}
	if s, ok := c.Get("grace-period"); ok {
		fmt.Println(s.Values[0], "from", s.Source)
	}
	if err := c.Format(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// 30s from testdata/example.toml:3
	// # read testdata/example.toml
	// np = 8  # flag --np
	// tag-output = false  # default
	// grace-period = "30s"  # testdata/example.toml:3
	// x = ["FOO", "BAR=1"]  # env GORUN_X
}

func ExampleEnvName() {
	fmt.Println(config.EnvName("grace-period"))
	// Output: GORUN_GRACE_PERIOD
}
