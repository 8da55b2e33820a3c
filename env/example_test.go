package env_test

import (
	"fmt"
	"strings"

	"github.com/gorun/gorun/env"
)

func ExampleBuild() {
	r := env.Rank{JobID: "abc", Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, NodeCount: 1,
		Host: "localhost", MasterAddr: "127.0.0.1", MasterPort: 24001}
	for _, kv := range env.Build([]string{"PATH=/usr/bin"}, r, []string{"NCCL_DEBUG=INFO"}) {
		if strings.HasPrefix(kv, "RANK=") || strings.HasPrefix(kv, "MASTER_") || strings.HasPrefix(kv, "NCCL") || strings.HasPrefix(kv, "PATH") {
			fmt.Println(kv)
		}
	}
	// Output:
	// PATH=/usr/bin
	// MASTER_ADDR=127.0.0.1
	// MASTER_PORT=24001
	// RANK=1
	// NCCL_DEBUG=INFO
}
