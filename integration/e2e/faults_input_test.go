//go:build e2e

package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/integration/fleet"
)

// badValue is one bad input of the fault catalogue (FAULTS.md §E) as the
// bytes written under a snapshot key, with the pointer's hash.
type badValue struct {
	manifest string
	hash     string
}

// Catalogue E1, E2, E4–E8, E10, E12: bad values written straight into etcd
// (the scheduler stopped, so nothing repairs them). Every BFE2 proxy refuses
// each one, naming it, and keeps serving its last good version: the figure
// is the requests failed while the bad value is live (exactly 0 of 400 sent
// after the refusal) and the time to refuse. Then the whole snapshot prefix
// and the pointer are deleted (E12): the proxies keep the last good; the
// scheduler, restarted, publishes again and every proxy applies it (time to
// recover measured from the restart).
func TestFaultsBadSnapshotInEtcd(t *testing.T) {
	f, good := fleetWithoutScheduler(t)
	v := good.Meta.Version
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cases := []struct {
		id, what string
		value    func(ver uint64) badValue
		reason   string // what the refusal must say
	}{
		{"E1", "negative row weight", rowWeights(good, map[string]int{"SC1": -10, "SC2": 110}), "negative"},
		{"E2", "row weight 45.5 (float)", rawRow(good, "45.5"), "not an integer"},
		{"E2", "row weight 1e309", rawRow(good, "1e309"), "not an integer"},
		{"E2", `row weight "45" (string)`, rawRow(good, `"45"`), "not an integer"},
		{"E4", "GSLB_BLACKHOLE = 100 without allow_full_drop", rowWeights(good, map[string]int{config.Blackhole: 100}), "allow_full_drop"},
		{"E5", "row names an unknown sub-cluster", rowWeights(good, map[string]int{"SC1": 50, "SC9": 50}), `"SC9" does not exist`},
		{"E6", "duplicate JSON key in the row", rawEdit(good, `"SC1":987654`, `"SC1":100,"SC1":0`), `duplicate key "SC1"`},
		{"E7", "truncated manifest", truncated(good), "incomplete"},
		{"E7", "empty manifest", func(uint64) badValue { return badValue{manifest: "", hash: good.Meta.Hash} }, "incomplete"},
		{"E8", "unknown field in meta", rawEdit(good, `"meta":{`, `"meta":{"schema_version":2,`), "schema_version"},
		{"E10", "manifest names a part that is not stored", missingPart(good), "part"},
		{"E10", "content digest mismatch", flippedContent(good), "digest"},
	}
	for i, c := range cases {
		ver := v + uint64(i) + 1
		bv := c.value(ver)
		writeSnapshot(ctx, t, f, "BFE2", ver, bv.manifest, snapshot.Pointer{Lineage: good.Meta.Lineage, Version: ver, Hash: bv.hash})
		began := time.Now()
		var reason string
		eventually(t, 30*time.Second, fmt.Sprintf("%s (%s): every BFE2 proxy refuses v%d", c.id, c.what, ver), func() error {
			sts, err := statuses(ctx, f, "BFE2")
			if err != nil {
				return err
			}
			for _, p := range f.ProxiesOf("BFE2") {
				st := sts[p.ID]
				if st.RejectedVersion != ver || st.AppliedVersion != v {
					return fmt.Errorf("%s: applied v%d, rejected v%d (%s)", p.ID, st.AppliedVersion, st.RejectedVersion, st.RejectedReason)
				}
				if !strings.Contains(st.RejectedReason, c.reason) {
					return fmt.Errorf("%s: reason %q does not name %q", p.ID, st.RejectedReason, c.reason)
				}
				reason = st.RejectedReason
			}
			return nil
		})
		refused := time.Since(began)
		failed, sent := failedOf(splitLoad(f, "BFE2", 400, 700000+i*1000))
		t.Logf("%s %s: refused by 2/2 proxies in %.1f s (%q); %d of %d requests failed while it was live",
			c.id, c.what, refused.Seconds(), reason, failed, sent)
		if failed != 0 {
			t.Errorf("%s: %d of %d requests failed with a refused snapshot live", c.id, failed, sent)
		}
	}

	// E12: the pointer and every snapshot of BFE2 deleted.
	sp, _ := f.Layout.SnapshotPrefix("BFE2")
	ck, _ := f.Layout.Current("BFE2")
	if _, err := f.Client.Txn(ctx).Then(clientv3.OpDelete(sp, clientv3.WithPrefix()), clientv3.OpDelete(ck)).Commit(); err != nil {
		t.Fatal(err)
	}
	failed, sent := failedOf(splitLoad(f, "BFE2", 400, 800000))
	for _, p := range f.ProxiesOf("BFE2") {
		var st struct {
			AppliedVersion uint64 `json:"applied_version"`
		}
		if err := getJSON(p.AdminURL+"/v1/status", &st); err != nil {
			t.Fatal(err)
		}
		if st.AppliedVersion != v {
			t.Fatalf("E12: %s applied v%d after the prefix was deleted, want the last good v%d", p.ID, st.AppliedVersion, v)
		}
	}
	if failed != 0 {
		t.Errorf("E12: %d of %d requests failed with the snapshot prefix deleted", failed, sent)
	}
	healed := time.Now()
	if err := f.RestartScheduler(1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "E12: the restarted scheduler publishes BFE2 again", func() error {
		_, err := f.Current(ctx, "BFE2")
		return err
	})
	nv := waitApplied(t, f, "BFE2", 60*time.Second)
	t.Logf("E12 snapshot prefix and pointer deleted: every proxy kept v%d, %d of %d requests failed; after the scheduler restart every proxy applied v%d %.1f s later",
		v, failed, sent, nv, time.Since(healed).Seconds())
}

// fleetWithoutScheduler starts a fleet, waits until BFE2 serves, stops the
// scheduler (nothing repairs what a test writes) and returns BFE2's live
// snapshot, applied by every BFE2 proxy.
func fleetWithoutScheduler(t *testing.T) (*fleet.Fleet, *snapshot.Snapshot) {
	t.Helper()
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE2", 30*time.Second)
	if err := f.Schedulers[0].Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The scheduler may have published once more before it stopped.
	v := waitApplied(t, f, "BFE2", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	good, err := liveSnapshot(ctx, f, "BFE2")
	if err != nil || good.Meta.Version != v {
		t.Fatalf("live snapshot: %v (want v%d)", err, v)
	}
	return f, good
}

// failedOf counts the outcomes that are not a backend's 200 (BFE2's rows
// have no blackhole share).
func failedOf(outs []outcome) (failed, sent int) {
	for _, o := range outs {
		if o.Err != nil || o.Status != 200 {
			failed++
		}
	}
	return failed, len(outs)
}

func writeSnapshot(ctx context.Context, t *testing.T, f *fleet.Fleet, pc string, ver uint64, manifest string, p snapshot.Pointer) {
	t.Helper()
	mk, _ := f.Layout.Snapshot(pc, ver)
	ck, _ := f.Layout.Current(pc)
	pj, _ := json.Marshal(p)
	if _, err := f.Client.Txn(ctx).Then(clientv3.OpPut(mk, manifest), clientv3.OpPut(ck, string(pj))).Commit(); err != nil {
		t.Fatal(err)
	}
}

// next is good as version ver, with cluster demo-main's row set to w (nil:
// unchanged) and a content hash that matches: only the validator can refuse it.
func next(good *snapshot.Snapshot, ver uint64, w map[string]int) *snapshot.Snapshot {
	s := *good
	s.Clusters = map[string]snapshot.Cluster{}
	for k, c := range good.Clusters {
		s.Clusters[k] = c
	}
	if w != nil {
		c := s.Clusters["demo-main"]
		c.Row = snapshot.Row{Denominator: 100, Weights: w}
		s.Clusters["demo-main"] = c
	}
	s.Meta.Version, s.Meta.Parent = ver, good.Meta.Version
	s.Meta.Hash = snapshot.ContentHash(&s)
	return &s
}

func rowWeights(good *snapshot.Snapshot, w map[string]int) func(uint64) badValue {
	return func(ver uint64) badValue {
		s := next(good, ver, w)
		m, _, err := snapshot.Encode(s)
		if err != nil {
			panic(err)
		}
		mj, _ := json.Marshal(m)
		return badValue{manifest: string(mj), hash: s.Meta.Hash}
	}
}

// rawEdit encodes good as version ver with the row SC1=987654, SC2=876543,
// replaces old by new in the JSON content, and wraps it in a manifest whose
// digests match the edited bytes: only the strict decoder can refuse it.
func rawEdit(good *snapshot.Snapshot, old, new string) func(uint64) badValue {
	return func(ver uint64) badValue {
		s := next(good, ver, map[string]int{"SC1": 987654, "SC2": 876543})
		raw, _ := json.Marshal(s)
		if !bytes.Contains(raw, []byte(old)) {
			panic(fmt.Sprintf("rawEdit: %q not in the snapshot", old))
		}
		raw = bytes.Replace(raw, []byte(old), []byte(new), 1)
		raw = bytes.Replace(raw, []byte(`"SC2":876543`), []byte(`"SC2":55`), 1)
		return manifestOf(s.Meta, raw)
	}
}

// rawRow makes SC1's weight the literal lit (SC2 gets 55).
func rawRow(good *snapshot.Snapshot, lit string) func(uint64) badValue {
	return rawEdit(good, `"SC1":987654`, `"SC1":`+lit)
}

func manifestOf(meta snapshot.Meta, raw []byte) badValue {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	sum := sha256.Sum256(buf.Bytes())
	m := snapshot.Manifest{Meta: meta, Encoding: snapshot.Encoding, Size: buf.Len(), Digest: hex.EncodeToString(sum[:]), Inline: buf.Bytes()}
	mj, _ := json.Marshal(m)
	return badValue{manifest: string(mj), hash: meta.Hash}
}

func truncated(good *snapshot.Snapshot) func(uint64) badValue {
	return func(ver uint64) badValue {
		bv := rowWeights(good, nil)(ver)
		bv.manifest = bv.manifest[:len(bv.manifest)/2]
		return bv
	}
}

func missingPart(good *snapshot.Snapshot) func(uint64) badValue {
	return func(ver uint64) badValue {
		s := next(good, ver, nil)
		m, _, err := snapshot.Encode(s)
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(m.Inline)
		m.Parts, m.Inline = []string{hex.EncodeToString(sum[:])}, nil
		mj, _ := json.Marshal(m)
		return badValue{manifest: string(mj), hash: s.Meta.Hash}
	}
}

func flippedContent(good *snapshot.Snapshot) func(uint64) badValue {
	return func(ver uint64) badValue {
		s := next(good, ver, nil)
		m, _, err := snapshot.Encode(s)
		if err != nil {
			panic(err)
		}
		m.Inline[len(m.Inline)/2] ^= 0x01
		mj, _ := json.Marshal(m)
		return badValue{manifest: string(mj), hash: s.Meta.Hash}
	}
}
