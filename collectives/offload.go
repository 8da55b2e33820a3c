package collectives

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/gorun/gorun/plugins"
)

// Offloader runs collectives outside the communicator: a collective
// plugin's implementation (plugins.Collective). Run reports false, with a
// nil error, when it declines op; the communicator then runs its own
// algorithm. Every rank must decline or accept alike, which a plugin
// guarantees by deciding from op alone.
type Offloader interface {
	Run(ctx context.Context, op plugins.Op, send, recv []byte) (bool, error)
}

// openPlugin starts the plugin name (s.Plugin or s.Device) for this rank,
// its log going to logger's writer.
func openPlugin(s Setup, name string, logger *log.Logger) (*plugins.Client, error) {
	o := plugins.Options{
		Rank: s.Rank, Size: s.Size, LocalRank: s.LocalRank,
		Iface: s.Iface, PluginOptions: s.PluginOptions, Log: logger.Writer(),
		NoHandoff: s.NoHandoff,
	}
	if strings.ContainsRune(name, '/') {
		o.Path = name
	} else {
		o.Name = name
	}
	return plugins.Open(o)
}

// recsHaveColl reports whether every rank's plugin has a collective.
func recsHaveColl(recs []record) bool {
	for _, r := range recs {
		if !r.HasColl {
			return false
		}
	}
	return true
}

// joinCollective gives the plugin's collective every rank's handle, when
// every rank has one; otherwise the communicator runs every collective
// itself, and rank 0 says why on logger.
func joinCollective(ctx context.Context, s Setup, k *plugins.Collective, recs []record, logger *log.Logger) error {
	if !recsHaveColl(recs) {
		if s.Rank == 0 {
			for r, rec := range recs {
				if !rec.HasColl {
					logger.Printf("gorun: rank %d has no collective plugin (%s); every rank runs its own algorithms", r, rec.PluginErr)
					break
				}
			}
		}
		return nil
	}
	handles := make([][]byte, len(recs))
	for r, rec := range recs {
		handles[r] = rec.Coll
	}
	if err := k.Join(ctx, handles); err != nil {
		return fmt.Errorf("collectives: init: rank %d: %w", s.Rank, err)
	}
	return nil
}

// offload offers the running operation to the communicator's collective
// plugin, if it has one: count is as plugins.Op says, root is the root of
// broadcast and reduce. It reports whether the plugin ran it.
func (o *task) offload(send, recv []byte, count, root int) (bool, error) {
	c := o.c
	if c.offload == nil {
		return false, nil
	}
	op := plugins.Op{
		Kind: o.hdr.kind.String(), DType: o.hdr.dtype.String(),
		Count: count, Root: root, Rank: c.rank, Size: c.size,
	}
	switch o.hdr.kind {
	case CollAllReduce, CollReduce, CollReduceScatter:
		op.RedOp = o.hdr.op.String()
	}
	ok, err := c.offload.Run(o.ctx, op, send, recv)
	if ok {
		o.setAlgo(AlgoPlugin, 0)
		c.offloaded.Add(1)
	}
	if err != nil {
		return true, fmt.Errorf("collectives: %s: collective plugin: %w", o.name, err)
	}
	return ok, nil
}
