package codec_test

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
)

// TestRejects covers the bad inputs of docs/INVARIANTS.md that are structural.
func TestRejects(t *testing.T) {
	tests := []struct{ doc, want string }{
		{`{"pins":[{"weights":{"SC1":1.5}}]}`, `pins[0].weights.SC1: 1.5 is not an integer`},
		{`{"pins":[{"weights":{"SC1":"10"}}]}`, `pins[0].weights.SC1: "10" is not an integer`},
		{`{"pins":[{"weights":{"SC1":1e309}}]}`, `pins[0].weights.SC1: 1e309 is not an integer`},
		{`{"pins":[{"weights":{"SC1":1e2}}]}`, `pins[0].weights.SC1: 1e2 is not an integer`},
		{`{"pins":[{"weights":{"SC1":99999999999999999999}}]}`, `pins[0].weights.SC1: 99999999999999999999 is out of range`},
		{`{"pins":[{"weights":{"SC1":1,"SC1":2}}]}`, `pins[0].weights: duplicate key "SC1"`},
		{`{"pins":[],"pins":[]}`, `duplicate key "pins"`},
		{`{"pins":[{"weightz":{}}]}`, `pins[0].weightz: unknown field`},
		{`{"Pins":[]}`, `Pins: unknown field`},
		{`{"pins":[{"weights":{"SC1":1}}`, `pins: unexpected end of document`},
		{`{"clusters":{"a":{"policy":{"retyr":{}}}}}`, `clusters.a.policy.retyr: unknown field`},
		{`{"clusters":{"a":{"policy":{"health":{"interval":2}}}}}`, `clusters.a.policy.health.interval: 2 is not a duration; want a string with a unit, like "2s" or "500ms"`},
		{`{"clusters":{"a":{"policy":{"health":{"interval":"2"}}}}}`, `clusters.a.policy.health.interval: "2" is not a duration; want a number with a unit, like "2s"`},
		{`{"clusters":{"a":{"policy":{"health":{"interval":"-2s"}}}}}`, `clusters.a.policy.health.interval: "-2s" must not be negative`},
		{`{"clusters":{"a":{"subclusters":{"S":{"instances":[{"port":1.5}]}}}}}`, `clusters.a.subclusters.S.instances[0].port: 1.5 is not an integer`},
		{`{"clusters":{"a":{"subclusters":{"S":{"excluded":"yes"}}}}}`, `clusters.a.subclusters.S.excluded: "yes" is not true or false`},
		{`{"topology":{"idcs":"IDC1"}}`, `topology.idcs: "IDC1" is not a list`},
		{"{\"products\":{\"x\":{\"hosts\":[\"\xff\"]}}}", `document is not valid UTF-8`},
		{`{} {}`, `unexpected data after the top-level value`},
		{`[]`, `a list is not an object`},
		{``, `document is empty`},
		{"  \n", `document is empty`},
		{strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100), `a: unknown field`},
		{"pins:\n- weights: {SC1: 1.5}\n", `pins[0].weights.SC1: 1.5 is not an integer`},
		{"pins:\n- weights: {SC1: \"10\"}\n", `pins[0].weights.SC1: "10" is not an integer`},
		{"pins:\n- weights: {SC1: 010}\n", `yaml: line 2 column 18: 010 is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string`},
		{"pins:\n- weights: {SC1: 0x10}\n", `yaml: line 2 column 18: 0x10 is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string`},
		{"pins:\n- weights: {SC1: 1_000}\n", `yaml: line 2 column 18: 1_000 is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string`},
		{"pins:\n- weights: {SC1: .inf}\n", `yaml: line 2 column 18: .inf is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string`},
		{"pins:\n- weights: {SC1: 1.0}\n", `yaml: line 2 column 18: 1.0 is written as a fraction or with an exponent; write a plain integer (1) or quote it if it is a string`},
		{"pins:\n- weights: {SC1: 1e3}\n", `yaml: line 2 column 18: 1e3 is written as a fraction or with an exponent; write a plain integer (1000) or quote it if it is a string`},
		{"pins:\n- weights: {SC1: 1e309}\n", `pins[0].weights.SC1: "1e309" is not an integer`},
		{"topology: {idcs: [on]}\n", `topology.idcs[0]: true is not a string`},
		{"scheduler:\n  history: 5\n  history: 6\n", "yaml: unmarshal errors:\n  line 3: key \"history\" already set in map"},
		{"topology: [", "yaml: line 1: did not find expected node content"},
	}
	for _, tt := range tests {
		var s config.State
		err := codec.Unmarshal([]byte(tt.doc), &s)
		if err == nil {
			t.Errorf("Unmarshal(%q) = nil, want %q", tt.doc, tt.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Unmarshal(%q)\n got  %q\n want %q", tt.doc, err.Error(), tt.want)
		}
	}
}

func TestAccepts(t *testing.T) {
	docs := []string{
		`{"scheduler":{"history":7},"pins":[{"weights":{"SC1":100}}]}`,
		"scheduler:\n  history: 7\npins:\n- weights: {SC1: 100}\n",
		"scheduler: {history: 7}\npins: [{weights: {SC1: 100}, reason: \"010\"}]\n",
	}
	for _, d := range docs {
		var s config.State
		if err := codec.Unmarshal([]byte(d), &s); err != nil {
			t.Errorf("Unmarshal(%q): %v", d, err)
			continue
		}
		if s.Scheduler.History != 7 || s.Pins[0].Weights["SC1"] != 100 {
			t.Errorf("Unmarshal(%q) = %+v", d, s)
		}
		// Left-out fields keep their defaults.
		if s.Scheduler.MaxStepPercent != 10 || s.Scheduler.Denominator != 100 {
			t.Errorf("scheduler defaults lost: %+v", s.Scheduler)
		}
	}
}

func TestExplicitZeroKeptOverDefault(t *testing.T) {
	var s config.State
	doc := `{"clusters":{"c":{"subclusters":{},"policy":{"retry":{"retry_max":0}}}}}`
	if err := codec.Unmarshal([]byte(doc), &s); err != nil {
		t.Fatal(err)
	}
	p := s.Clusters["c"].Policy
	if p.Retry.RetryMax != 0 || p.Retry.CrossRetry != 1 || p.Health.FailNum != 5 {
		t.Errorf("policy = %+v; want retry_max 0 as written and other defaults", p.Retry)
	}
}

func TestDecodeValueNamesTheKey(t *testing.T) {
	var v struct {
		Version int64 `json:"version"`
	}
	if err := codec.DecodeValue("/sluice/current/pc1", []byte(`{"version":3}`), &v); err != nil || v.Version != 3 {
		t.Fatalf("good value: %v, %+v", err, v)
	}
	err := codec.DecodeValue("/sluice/current/pc1", []byte(`{"version":3,"extra":1}`), &v)
	if err == nil || !strings.HasPrefix(err.Error(), "/sluice/current/pc1: ") || !strings.Contains(err.Error(), "extra") {
		t.Fatalf("unknown field: got %v, want an error naming the key and the field", err)
	}
}
