package snapshot_test

import (
	"testing"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

func BenchmarkDbgDecode(b *testing.B) {
	s := bigSnapshot(200, 5)
	for _, split := range []bool{false, true} {
		enc := snapshot.Encode
		if split {
			enc = snapshot.EncodeSplit
		}
		m, parts, _ := enc(s)
		st := store{}
		for _, p := range parts {
			st[p.Digest] = p.Data
		}
		b.Run(map[bool]string{false: "whole", true: "split"}[split], func(b *testing.B) {
			for range b.N {
				got, err := snapshot.DecodeBatch(m, st.many)
				if err != nil {
					b.Fatal(err)
				}
				_ = got
			}
		})
	}
	b.Run("check", func(b *testing.B) {
		for range b.N {
			validate.Check(s)
		}
	})
}
