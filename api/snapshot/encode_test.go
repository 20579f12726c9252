package snapshot_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// bigSnapshot has clusters×2 sub-clusters×perSub instances with random
// addresses and labels, so that it compresses poorly and needs parts.
func bigSnapshot(clusters, perSub int) *snapshot.Snapshot {
	rng := rand.New(rand.NewPCG(1, 2))
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1", Version: 42, Parent: 41, Author: "test", CreatedAt: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)},
		Settings: snapshot.Settings{IDC: "IDC1", TrustedProxies: []string{"10.0.0.0/8"}},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.local"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "c0"}}}},
		Clusters: map[string]snapshot.Cluster{},
	}
	for c := 0; c < clusters; c++ {
		cl := snapshot.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: config.DefaultPolicy(),
			Row: snapshot.Row{Denominator: 10000, Weights: map[string]int{"SC1": 4500, "SC2": 4500, config.Blackhole: 1000}}}
		for sc := 1; sc <= 2; sc++ {
			sub := config.SubCluster{IDC: fmt.Sprintf("IDC%d", sc)}
			for i := 0; i < perSub; i++ {
				sub.Instances = append(sub.Instances, config.Instance{
					Addr:        fmt.Sprintf("fd%02x:%x:%x::%x", c, rng.Uint32()&0xffff, rng.Uint32()&0xffff, i),
					Port:        1 + rng.IntN(65535),
					Weight:      rng.IntN(100),
					CapacityRPS: rng.IntN(5000),
					State:       config.StateHealthy,
					Labels:      map[string]string{"host": fmt.Sprintf("h-%016x", rng.Uint64())},
				})
			}
			cl.SubClusters[fmt.Sprintf("SC%d", sc)] = sub
		}
		s.Clusters[fmt.Sprintf("c%d", c)] = cl
	}
	return s
}

type store map[string][]byte

func (st store) get(d string) ([]byte, error) {
	b, ok := st[d]
	if !ok {
		return nil, snapshot.ErrMissingPart
	}
	return b, nil
}

func encodeToStore(t *testing.T, s *snapshot.Snapshot) (snapshot.Manifest, store) {
	t.Helper()
	m, parts, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	st := store{}
	for _, p := range parts {
		st[p.Digest] = p.Data
	}
	return m, st
}

// big50k is the 50 000-instance snapshot, built and encoded once for every
// test that needs it (encoding it under -race takes seconds).
var big50k = sync.OnceValues(func() (*snapshot.Snapshot, error) { return bigSnapshot(10, 2500), nil })

func TestRoundTrip50000Instances(t *testing.T) {
	s, _ := big50k()
	n := 0
	for _, cl := range s.Clusters {
		for _, sc := range cl.SubClusters {
			n += len(sc.Instances)
		}
	}
	if n != 50000 {
		t.Fatalf("built %d instances, want 50000", n)
	}
	m, parts, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Inline) != 0 || len(parts) < 2 {
		t.Fatalf("want content split into parts, have %d inline bytes and %d parts", len(m.Inline), len(parts))
	}
	st := store{}
	total := 0
	for i, p := range parts {
		if len(p.Data) > snapshot.PartSize {
			t.Errorf("part %d is %d bytes, over PartSize %d", i, len(p.Data), snapshot.PartSize)
		}
		total += len(p.Data)
		st[p.Digest] = p.Data
	}
	mj, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(mj) >= 64<<10 {
		t.Errorf("manifest JSON is %d bytes; want a small manifest (< 64 KiB, far below 1 MiB)", len(mj))
	}
	t.Logf("50000 instances: %d parts, %d compressed bytes, manifest %d bytes", len(parts), total, len(mj))

	// The manifest itself goes through etcd as JSON: decode it strictly too.
	var m2 snapshot.Manifest
	if err := json.Unmarshal(mj, &m2); err != nil {
		t.Fatal(err)
	}
	got, err := snapshot.Decode(m2, st.get)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatal("decoded snapshot differs from the encoded one")
	}
	if err := validate.Snapshot(got); err != nil {
		t.Fatalf("decoded snapshot is invalid: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	s, _ := big50k()
	m, st := encodeToStore(t, s)
	if len(m.Parts) < 2 {
		t.Fatalf("want parts, have %d", len(m.Parts))
	}

	t.Run("missing part", func(t *testing.T) {
		miss := store{}
		for k, v := range st {
			miss[k] = v
		}
		delete(miss, m.Parts[1])
		_, err := snapshot.Decode(m, miss.get)
		if !errors.Is(err, snapshot.ErrMissingPart) {
			t.Fatalf("err = %v, want ErrMissingPart", err)
		}
		if !strings.Contains(err.Error(), "part 1 ("+m.Parts[1]+")") {
			t.Errorf("err %q does not name part 1", err)
		}
	})
	t.Run("tampered part", func(t *testing.T) {
		bad := store{}
		for k, v := range st {
			bad[k] = v
		}
		p := append([]byte(nil), st[m.Parts[0]]...)
		p[len(p)/2] ^= 0xff
		bad[m.Parts[0]] = p
		_, err := snapshot.Decode(m, bad.get)
		if err == nil || !strings.Contains(err.Error(), "part 0 digest is") {
			t.Fatalf("err = %v, want a part digest mismatch", err)
		}
	})
	t.Run("manifest digest", func(t *testing.T) {
		m2 := m
		m2.Digest = strings.Repeat("0", 64)
		_, err := snapshot.Decode(m2, st.get)
		if err == nil || !strings.Contains(err.Error(), "content digest is") {
			t.Fatalf("err = %v, want a content digest mismatch", err)
		}
	})
	t.Run("manifest size", func(t *testing.T) {
		m2 := m
		m2.Size++
		_, err := snapshot.Decode(m2, st.get)
		if err == nil || !strings.Contains(err.Error(), "manifest says") {
			t.Fatalf("err = %v, want a size mismatch", err)
		}
	})
	t.Run("reordered parts", func(t *testing.T) {
		m2 := m
		m2.Parts = append([]string{m.Parts[1], m.Parts[0]}, m.Parts[2:]...)
		if _, err := snapshot.Decode(m2, st.get); err == nil {
			t.Fatal("reordered parts decoded")
		}
	})
	t.Run("both inline and parts", func(t *testing.T) {
		m2 := m
		m2.Inline = []byte{1}
		_, err := snapshot.Decode(m2, st.get)
		if err == nil || !strings.Contains(err.Error(), "both inline content and parts") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("wrong encoding", func(t *testing.T) {
		m2 := m
		m2.Encoding = "json"
		if _, err := snapshot.Decode(m2, st.get); err == nil {
			t.Fatal("unknown encoding decoded")
		}
	})
}

func TestInlineRoundTripAndHashCheck(t *testing.T) {
	s := bigSnapshot(1, 3)
	m, st := encodeToStore(t, s)
	if len(m.Inline) == 0 || len(m.Parts) != 0 {
		t.Fatalf("small snapshot not inline: %d parts", len(m.Parts))
	}
	got, err := snapshot.Decode(m, st.get)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatal("inline round trip changed the snapshot")
	}

	// Content that does not match meta.hash is refused even when the
	// manifest digests are consistent (a writer bug, not corruption).
	s2 := bigSnapshot(1, 3)
	s2.Meta.Hash = strings.Repeat("a", 64)
	m2, st2 := encodeToStore(t, s2)
	_, err = snapshot.Decode(m2, st2.get)
	if err == nil || !strings.Contains(err.Error(), "content hash is") {
		t.Fatalf("err = %v, want a content hash mismatch", err)
	}
}
