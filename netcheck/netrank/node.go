package netrank

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/gorun/gorun/netcheck/nodecheck"
)

// nodeReport is this host's own report (package nodecheck), as JSON; its
// GPU copies are bounded by budget.
func nodeReport(ctx context.Context, host string, budget time.Duration) []byte {
	r := nodecheck.Measure(ctx, nodecheck.Options{Host: host, Budget: budget})
	b, err := json.Marshal(r)
	if err != nil {
		return nil
	}
	return b
}

// nodeText formats the hosts' reports (JSON) as text; those that do not
// parse are left out.
func nodeText(nodes [][]byte) string {
	var rs []nodecheck.Report
	for _, b := range nodes {
		var r nodecheck.Report
		if len(b) > 0 && json.Unmarshal(b, &r) == nil {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return ""
	}
	var sb strings.Builder
	nodecheck.Format(&sb, rs)
	return sb.String()
}
