package validate

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// FuzzSnapshotMutations is the structure-aware snapshot target: each input
// is a list of field edits (op, index, number, text) applied to the
// mission's valid BFE1 snapshot, so the fuzzer explores snapshots that are
// well-formed JSON and nearly valid instead of mostly undecodable bytes.
// For every edited snapshot:
//   - Snapshot is deterministic and returns Errors when it rejects;
//   - decode∘encode = id: Encode then Decode gives back the same snapshot,
//     and the validator says the same about both;
//   - a manifest whose content has one byte flipped does not decode.
func FuzzSnapshotMutations(f *testing.F) {
	base := missionSnapshot(f)
	raw, err := json.Marshal(base)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{}, int64(0), "")
	for op := byte(0); op < mutationOps; op++ {
		f.Add([]byte{op}, int64(0), "")
		f.Add([]byte{op, 1}, int64(-1), "SC1")
		f.Add([]byte{op}, int64(101), "demo-main")
		f.Add([]byte{op}, int64(1<<40), "../x")
	}
	f.Add([]byte{3, 7, 9}, int64(65536), "req_path_prefix_in(\"/x\"")
	f.Fuzz(func(t *testing.T, ops []byte, n int64, text string) {
		if len(ops) > 16 {
			ops = ops[:16]
		}
		s, err := snapshot.Unmarshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		for i, op := range ops {
			mutate(s, op, i, n+int64(i), text)
		}
		s.Meta.Hash = snapshot.ContentHash(s)

		verr := Snapshot(s)
		if verr2 := Snapshot(s); errText(verr) != errText(verr2) {
			t.Fatalf("Snapshot is not deterministic:\n%v\n---\n%v", verr, verr2)
		}
		if verr != nil {
			if _, ok := AsErrors(verr); !ok {
				t.Fatalf("Snapshot returned %T, want Errors", verr)
			}
		}

		m, parts, err := snapshot.Encode(s)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		byDigest := map[string][]byte{}
		for _, p := range parts {
			byDigest[p.Digest] = p.Data
		}
		get := func(d string) ([]byte, error) {
			if b, ok := byDigest[d]; ok {
				return b, nil
			}
			return nil, snapshot.ErrMissingPart
		}
		back, err := snapshot.Decode(m, get)
		if err != nil {
			// Text the JSON encoder rewrites (invalid UTF-8 becomes U+FFFD)
			// no longer matches the content hash: Decode must say so, and
			// only that.
			if !validUTF8Everywhere(s) {
				return
			}
			t.Fatalf("Decode(Encode(s)): %v", err)
		}
		if !reflect.DeepEqual(normalizeSnapshot(t, s), normalizeSnapshot(t, back)) {
			t.Fatalf("Decode(Encode(s)) differs from s")
		}
		if e1, e2 := errText(verr), errText(Snapshot(back)); e1 != e2 {
			t.Fatalf("validator disagrees across encode/decode:\n%s\n---\n%s", e1, e2)
		}

		if len(m.Inline) > 0 {
			bad := m
			bad.Inline = slices.Clone(m.Inline)
			bad.Inline[int(uint64(n)%uint64(len(bad.Inline)))] ^= 0x40
			if got, err := snapshot.Decode(bad, get); err == nil || got != nil {
				t.Fatalf("a manifest with a flipped content byte decoded (err %v)", err)
			}
		}
	})
}

const mutationOps = 12

// mutate applies one field edit to s: op picks the field, i the element
// (cluster, sub-cluster, instance, product, rule) and n / text the value.
func mutate(s *snapshot.Snapshot, op byte, i int, n int64, text string) {
	clusters := sortedKeys(s.Clusters)
	if len(clusters) == 0 {
		return
	}
	cn := clusters[i%len(clusters)]
	c := s.Clusters[cn]
	subs := sortedKeys(c.SubClusters)
	switch op % mutationOps {
	case 0: // a row weight
		w := map[string]int{}
		for k, v := range c.Row.Weights {
			w[k] = v
		}
		if len(subs) > 0 {
			w[subs[i%len(subs)]] = int(n)
		}
		c.Row.Weights = w
	case 1:
		c.Row.Denominator = int(n)
	case 2: // a row weight for a sub-cluster that may not exist
		w := map[string]int{text: int(n)}
		for k, v := range c.Row.Weights {
			w[k] = v
		}
		c.Row.Weights = w
	case 3, 4, 5: // an instance's port, weight or address
		if len(subs) == 0 {
			return
		}
		sn := subs[i%len(subs)]
		sc := c.SubClusters[sn]
		if len(sc.Instances) == 0 {
			return
		}
		sc.Instances = slices.Clone(sc.Instances)
		in := &sc.Instances[i%len(sc.Instances)]
		switch op % mutationOps {
		case 3:
			in.Port = int(n)
		case 4:
			in.Weight = int(n)
		default:
			in.Addr = text
		}
		subsCopy := map[string]config.SubCluster{}
		for k, v := range c.SubClusters {
			subsCopy[k] = v
		}
		subsCopy[sn] = sc
		c.SubClusters = subsCopy
	case 6:
		s.Meta.Version = uint64(n)
	case 7:
		s.Meta.ProxyCluster = text
	case 8:
		s.Settings.IDC = text
	case 9: // a rule's condition
		editRule(s, i, func(r *config.Rule) { r.Cond = text })
	case 10: // a rule's target cluster
		editRule(s, i, func(r *config.Rule) { r.Cluster = text })
	case 11: // the cluster's retry budget and hash header
		c.Policy.Retry.RetryMax = int(n)
		c.Policy.Balance.Hash.Header = text
	}
	s.Clusters[cn] = c
}

// editRule applies f to one rule (picked by i) of one product.
func editRule(s *snapshot.Snapshot, i int, f func(*config.Rule)) {
	prods := sortedKeys(s.Products)
	if len(prods) == 0 {
		return
	}
	pn := prods[i%len(prods)]
	p := s.Products[pn]
	if len(p.Rules) == 0 {
		return
	}
	p.Rules = slices.Clone(p.Rules)
	f(&p.Rules[i%len(p.Rules)])
	s.Products[pn] = p
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// validUTF8Everywhere reports whether s survives JSON unchanged (the
// encoder replaces invalid UTF-8).
func validUTF8Everywhere(s *snapshot.Snapshot) bool {
	raw, err := json.Marshal(s)
	if err != nil {
		return false
	}
	back, err := snapshot.Unmarshal(raw)
	if err != nil {
		var se *json.SyntaxError
		return !errors.As(err, &se)
	}
	return snapshot.ContentHash(back) == s.Meta.Hash
}

// normalizeSnapshot maps empty collections to nil, as omitempty does.
func normalizeSnapshot(t *testing.T, s *snapshot.Snapshot) *snapshot.Snapshot {
	t.Helper()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	out, err := snapshot.Unmarshal(raw)
	if err != nil {
		t.Fatalf("re-decode: %v", err)
	}
	return out
}
