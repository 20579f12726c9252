package validate

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// badInputs are the bad inputs for documents of docs/INVARIANTS.md, as seeds.
var badInputs = []string{
	`{"topology":{"idcs":["IDC1"],"proxy_clusters":{"BFE1":{"idc":"IDC1"}}},"clusters":{"c":{"subclusters":{"SC1":{"idc":"IDC1"}}}},"pins":[{"proxy_cluster":"BFE1","cluster":"c","weights":{"SC1":-10,"GSLB_BLACKHOLE":110}}]}`,
	`{"pins":[{"weights":{"SC1":1.5}}]}`,
	`{"pins":[{"weights":{"SC1":1e309}}]}`,
	`{"pins":[{"weights":{"SC1":"45"}}]}`,
	`{"pins":[{"weights":{"SC1":99999999999999999999}}]}`,
	`{"pins":[{"proxy_cluster":"BFE1","cluster":"c","weights":{"SC1":45,"SC2":45}}]}`,
	`{"pins":[{"proxy_cluster":"BFE1","cluster":"c","weights":{"SC1":0,"GSLB_BLACKHOLE":0}}]}`,
	`{"pins":[{"proxy_cluster":"BFE1","cluster":"c","weights":{"GSLB_BLACKHOLE":100}}]}`,
	`{"pins":[{"proxy_cluster":"BFE1","cluster":"c","weights":{"SC9":100}}]}`,
	`{"pins":[{"weights":{"SC1":50,"SC1":50}}]}`,
	`{"pins":[{"weights":{"SC1":100},"colour":"red"}]}`,
	`{"topology":{"idcs":["IDC1"],"proxy_clusters":{"BFE1":{"idc":"IDC1"}}},"clusters":{"c":{"subclu`,
	"{\"topology\":{\"idcs\":[\"IDC\xff\"]}}",
	`{"clusters":{"../../etc":{"subclusters":{"a/b":{"idc":"\u0000"}}}}}`,
	`{"products":{"p":{"hosts":["a.local"],"rules":[{"cond":"req_path_prefix_in(\"/x\"","cluster":"c"}]}}}`,
	"pins:\n- weights: {SC1: 010}\n",
	"pins:\n- weights: {SC1: 45, SC1: 55}\n",
	"scheduler: {denominator: 1000, history: 0}\n",
	"a: &a [*a]\n",
	`null`, `{}`, `[]`, `""`, ``,
}

func FuzzDecodeValidate(f *testing.F) {
	for _, s := range badInputs {
		f.Add([]byte(s))
	}
	mission, err := os.ReadFile("../testdata/mission.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(mission)
	var st config.State
	if err := codec.Unmarshal(mission, &st); err != nil {
		f.Fatal(err)
	}
	j, _ := json.Marshal(&st)
	f.Add(j)

	f.Fuzz(func(t *testing.T, data []byte) {
		var s config.State
		if err := codec.Unmarshal(data, &s); err != nil {
			return
		}
		err := State(&s)
		if err2 := State(&s); (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("State is not deterministic:\n%v\n---\n%v", err, err2)
		}
		if err != nil {
			if _, ok := AsErrors(err); !ok {
				t.Fatalf("State returned %T, want Errors", err)
			}
			return
		}
		// Accepted: it must survive encode → decode unchanged.
		raw, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		var back config.State
		if err := codec.Unmarshal(raw, &back); err != nil {
			t.Fatalf("re-decode of an accepted state: %v", err)
		}
		if !reflect.DeepEqual(normalize(s), normalize(back)) {
			t.Fatalf("accepted state changed across encode/decode:\n%s", raw)
		}
	})
}

// normalize maps empty collections to nil: a document may spell an empty
// list or map explicitly, which encodes as absent (omitempty).
func normalize(s config.State) config.State {
	b, _ := json.Marshal(&s)
	var out config.State
	_ = json.Unmarshal(b, &out)
	return out
}

func FuzzDecodeValidateSnapshot(f *testing.F) {
	s := missionSnapshot(f)
	raw, err := json.Marshal(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"meta":{"proxy_cluster":"BFE1","version":1,"created_at":"2026-01-01T00:00:00Z"},"settings":{},"clusters":{"c":{"subclusters":{"S":{}},"row":{"denominator":100,"weights":{"S":101}}}}}`))
	f.Add([]byte(`{"meta":{"version":-1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := snapshot.Unmarshal(data)
		if err != nil {
			return
		}
		if err := Snapshot(s); err != nil {
			if _, ok := AsErrors(err); !ok {
				t.Fatalf("Snapshot returned %T, want Errors", err)
			}
		}
	})
}
