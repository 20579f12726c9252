package snapio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/snapiotest")

// sample is a snapshot too large to be inlined in its manifest: its
// instances carry incompressible labels.
func sample() *snapshot.Snapshot {
	rng := rand.New(rand.NewPCG(1, 2))
	var ins []config.Instance
	for i := range 1500 {
		var b strings.Builder
		for range 64 {
			fmt.Fprintf(&b, "%016x", rng.Uint64())
		}
		ins = append(ins, config.Instance{Addr: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), Port: 80, Weight: 1,
			State: config.StateHealthy, Labels: map[string]string{"noise": b.String()}})
	}
	return &snapshot.Snapshot{
		Meta: snapshot.Meta{ProxyCluster: "BFE1", Version: 3, CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		Clusters: map[string]snapshot.Cluster{"demo": {Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{"SC1": {
			IDC: "IDC1", Instances: ins,
		}}}},
	}
}

func put(t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	if _, err := cli.Put(context.Background(), k, v); err != nil {
		t.Fatal(err)
	}
}

// A published snapshot reads back whole; a missing manifest is not found, a
// missing part is ErrMissingPart, a manifest with a stray field is an error
// naming its key.
func TestManifestAndPartsReadBack(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := context.Background()
	want := sample()
	m, parts, err := snapshot.Encode(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) == 0 {
		t.Fatal("the sample was inlined: it tests no part reads")
	}
	mk, _ := layout.Snapshot("BFE1", 3)
	raw, _ := json.Marshal(m)
	put(t, cli, mk, string(raw))
	got, found, err := snapio.Manifest(ctx, cli, layout, "BFE1", 3)
	if err != nil || !found {
		t.Fatalf("Manifest: found=%v err=%v", found, err)
	}
	if _, err := snapshot.Decode(got, snapio.Parts(ctx, cli, layout)); !errors.Is(err, snapshot.ErrMissingPart) {
		t.Fatalf("Decode before the parts are written: %v, want ErrMissingPart", err)
	}
	for _, p := range parts {
		pk, _ := layout.Part(p.Digest)
		put(t, cli, pk, string(p.Data))
	}
	s, err := snapshot.Decode(got, snapio.Parts(ctx, cli, layout))
	if err != nil {
		t.Fatal(err)
	}
	inMemory := map[string][]byte{}
	for _, p := range parts {
		inMemory[p.Digest] = p.Data
	}
	direct, err := snapshot.Decode(m, func(d string) ([]byte, error) { return inMemory[d], nil })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, direct) || s.Meta.Version != 3 || len(s.Clusters["demo"].SubClusters["SC1"].Instances) != 1500 {
		t.Fatalf("read back %+v, want %+v", s, direct)
	}
	if _, found, err := snapio.Manifest(ctx, cli, layout, "BFE1", 4); found || err != nil {
		t.Fatalf("absent version: found=%v err=%v, want not found and no error", found, err)
	}
	put(t, cli, mk, strings.Replace(string(raw), "{", `{"stray":1,`, 1))
	if _, _, err := snapio.Manifest(ctx, cli, layout, "BFE1", 3); err == nil || !strings.Contains(err.Error(), mk) || !strings.Contains(err.Error(), "stray") {
		t.Fatalf("manifest with a stray field: %v, want an error naming %s and the field", err, mk)
	}
}

// A split snapshot of more clusters than one transaction's gets reads back
// whole through PartsBatch and through Parts; a missing cluster part is
// ErrMissingPart naming the cluster.
func TestPartsBatchReadsASplitSnapshot(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := context.Background()
	want := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1", Version: 4, CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		Clusters: map[string]snapshot.Cluster{},
	}
	for c := range 2 * snapio.MaxGetsPerTxn {
		want.Clusters[fmt.Sprintf("c%03d", c)] = snapshot.Cluster{Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{"SC1": {
			IDC: "IDC1", Instances: []config.Instance{{Addr: fmt.Sprintf("10.1.%d.%d", c/250, c%250+1), Port: 80, Weight: 1, State: config.StateHealthy}},
		}}}
	}
	m, parts, err := snapshot.EncodeStore(want)
	if err != nil || m.Encoding != snapshot.EncodingSplit {
		t.Fatalf("EncodeStore: %q, %v; want the split layout", m.Encoding, err)
	}
	for _, p := range parts[1:] {
		pk, _ := layout.Part(p.Digest)
		put(t, cli, pk, string(p.Data))
	}
	if _, err := snapshot.DecodeBatch(m, snapio.PartsBatch(ctx, cli, layout)); !errors.Is(err, snapshot.ErrMissingPart) || !strings.Contains(err.Error(), "head part ("+parts[0].Digest+")") {
		t.Fatalf("DecodeBatch without the head part: %v, want ErrMissingPart naming it", err)
	}
	pk, _ := layout.Part(parts[0].Digest)
	put(t, cli, pk, string(parts[0].Data))
	got, err := snapshot.DecodeBatch(m, snapio.PartsBatch(ctx, cli, layout))
	if err != nil {
		t.Fatal(err)
	}
	one, err := snapshot.Decode(m, snapio.Parts(ctx, cli, layout))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(one, want) {
		t.Fatal("the split snapshot read back differs from the one written")
	}
}
