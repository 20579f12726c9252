package inventory

import (
	"context"
	"fmt"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
)

// Load lists every input once, all at one etcd revision, and returns the
// View the scheduler would plan from (no watch, no goroutine). lbctl plans
// a proposed write on it: st, when not nil, stands for the stored desired
// state (its static instances merge with the agents' as the stored one's
// would). Invalid entries are handled as Run handles them, without logs.
func Load(ctx context.Context, cli *clientv3.Client, layout keys.Layout, st *config.State) (View, error) {
	inv := New(cli, layout, Options{Logger: slog.New(slog.DiscardHandler)})
	var rev int64
	for _, in := range inputs {
		s := inv.sink(in)
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := cli.Get(ctx, s.key, opts...)
		if err != nil {
			return View{}, fmt.Errorf("read the scheduler's inputs (%s): %w", in, err)
		}
		if rev == 0 {
			rev = r.Header.Revision
		}
		if err := s.Reset(r.Kvs, rev); err != nil {
			return View{}, err
		}
	}
	if st != nil {
		inv.mu.Lock()
		inv.state = st
		inv.mu.Unlock()
	}
	return inv.View(), nil
}
