package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Snapshots reads the kept versions of a proxy cluster (publish.Publisher).
type Snapshots interface {
	History(ctx context.Context, proxyCluster string) ([]snapshot.Meta, error)
	Load(ctx context.Context, proxyCluster string, version uint64) (*snapshot.Snapshot, error)
}

// RowChange is one cluster's row in two versions (nil: absent there).
type RowChange struct {
	Cluster string        `json:"cluster"`
	From    *snapshot.Row `json:"from"`
	To      *snapshot.Row `json:"to"`
}

// Diff is GET /ui/api/diff: the rows that differ between two versions.
type Diff struct {
	ProxyCluster string        `json:"proxy_cluster"`
	From         snapshot.Meta `json:"from"`
	To           snapshot.Meta `json:"to"`
	Rows         []RowChange   `json:"rows"`
}

// history serves GET /ui/api/history?proxy_cluster=B.
func (d *Dashboard) history(w http.ResponseWriter, r *http.Request) {
	pc := r.URL.Query().Get("proxy_cluster")
	if err := keys.ValidName(pc); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "proxy_cluster: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	h, err := d.o.Snapshots.History(ctx, pc)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"proxy_cluster": pc, "versions": h})
}

// diff serves GET /ui/api/diff?proxy_cluster=B&from=N&to=M.
func (d *Dashboard) diff(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pc := q.Get("proxy_cluster")
	if err := keys.ValidName(pc); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "proxy_cluster: " + err.Error()})
		return
	}
	var vs [2]uint64
	for i, k := range []string{"from", "to"} {
		v, err := strconv.ParseUint(q.Get(k), 10, 64)
		if err != nil || v == 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("%s %q: want a version number (1, 2, …)", k, q.Get(k))})
			return
		}
		vs[i] = v
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var snaps [2]*snapshot.Snapshot
	for i, v := range vs {
		s, err := d.o.Snapshots.Load(ctx, pc, v)
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, snapshot.ErrMissingPart) || isNotFound(err) {
				code = http.StatusNotFound
			}
			writeJSON(w, code, map[string]string{"error": fmt.Sprintf("%s v%d: %v", pc, v, err)})
			return
		}
		snaps[i] = s
	}
	writeJSON(w, http.StatusOK, diffRows(pc, snaps[0], snaps[1]))
}

// diffRows lists, by cluster name, the rows that differ.
func diffRows(pc string, a, b *snapshot.Snapshot) Diff {
	out := Diff{ProxyCluster: pc, From: a.Meta, To: b.Meta, Rows: []RowChange{}}
	names := map[string]bool{}
	for n := range a.Clusters {
		names[n] = true
	}
	for n := range b.Clusters {
		names[n] = true
	}
	for _, n := range sortedKeys(names) {
		var ra, rb *snapshot.Row
		if c, ok := a.Clusters[n]; ok {
			ra = &c.Row
		}
		if c, ok := b.Clusters[n]; ok {
			rb = &c.Row
		}
		if ra != nil && rb != nil && reflect.DeepEqual(*ra, *rb) {
			continue
		}
		out.Rows = append(out.Rows, RowChange{Cluster: n, From: ra, To: rb})
	}
	return out
}

// isNotFound: publish.Publisher.Manifest says "read <key>: not found" for
// a version not kept (any more).
func isNotFound(err error) bool { return strings.HasSuffix(err.Error(), ": not found") }
