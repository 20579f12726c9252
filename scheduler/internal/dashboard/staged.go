package dashboard

import (
	"encoding/json"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	rs "github.com/sluicelb/sluice/api/rollout"
)

// stagedSink keeps the staged rollout records (rollouts/<pc>, the ones lbctl
// rollout status shows), keyed by proxy cluster.
func (d *Dashboard) stagedSink() *sink {
	prefix := d.o.Layout.RolloutPrefix()
	pcOf := func(key string) string { return strings.TrimPrefix(key, prefix) }
	return &sink{d: d,
		clear: func() { d.staged = map[string]rs.Staged{} },
		del:   func(key string) { delete(d.staged, pcOf(key)) },
		put: func(kv *mvccpb.KeyValue) {
			pc := pcOf(string(kv.Key))
			var s rs.Staged
			if err := json.Unmarshal(kv.Value, &s); err != nil || pc == "" || strings.Contains(pc, "/") {
				d.o.Logger.Warn("dashboard: rollout record ignored", "key", string(kv.Key), "err", err)
				delete(d.staged, pc)
				return
			}
			d.staged[pc] = s
		},
	}
}
