package snapshot_test

import (
	"testing"

	"github.com/sluicelb/sluice/api/snapshot"
)

// BenchmarkDecodeOneClusterChange: decoding the next version after a
// one-cluster change at 200 clusters × 10 instances, as a proxy does:
// whole layout (Decode), split layout decoded whole (DecodeBatch) and
// split layout reusing the previous decode (DecodeReusing).
// Run: go test -run '^$' -bench DecodeOneClusterChange -benchmem ./snapshot/
func BenchmarkDecodeOneClusterChange(b *testing.B) {
	prev := bigSnapshot(200, 5)
	next := oneChanged(200, 5, "c17")
	st := store{}
	encode := func(enc func(*snapshot.Snapshot) (snapshot.Manifest, []snapshot.Part, error), s *snapshot.Snapshot) snapshot.Manifest {
		m, parts, err := enc(s)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range parts {
			st[p.Digest] = p.Data
		}
		return m
	}
	whole := encode(snapshot.Encode, next)
	_, d, err := snapshot.DecodeReusing(encode(snapshot.EncodeSplit, prev), st.many, nil)
	if err != nil {
		b.Fatal(err)
	}
	split := encode(snapshot.EncodeSplit, next)
	b.Run("whole", func(b *testing.B) {
		for range b.N {
			if _, err := snapshot.Decode(whole, st.get); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("split", func(b *testing.B) {
		for range b.N {
			if _, err := snapshot.DecodeBatch(split, st.many); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("split-reusing", func(b *testing.B) {
		for range b.N {
			if _, _, err := snapshot.DecodeReusing(split, st.many, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
