package codec_test

import (
	"fmt"
	"reflect"
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
		{"pins:\n- weights: {SC1: 1.0}\n", `pins[0].weights.SC1: 1.0 is not an integer`},
		{"pins:\n- weights: {SC1: 1e3}\n", `pins[0].weights.SC1: 1e3 is not an integer`},
		{"pins:\n- weights: {SC1: +2.0}\n", `pins[0].weights.SC1: 2.0 is not an integer`},
		{"x: &w 3.0\npins:\n- weights: {SC1: *w}\n", `pins[0].weights.SC1: 3.0 is not an integer`},
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

// TestIntegralFloats: a YAML float with an integral value (1.0, 50.0, 1e3)
// reads as that number in a float field and is refused, with its path, in
// an integer field — as JSON's 1.0 is; the converter alone would have made
// it the integer 1 for both.
func TestIntegralFloats(t *testing.T) {
	type doc struct {
		F   float64            `json:"f"`
		I   int                `json:"i"`
		L   []float64          `json:"l"`
		M   map[string]int     `json:"m"`
		N   map[string]float64 `json:"fm"`
		Any any                `json:"any"`
	}
	for _, c := range []struct {
		yaml, json string // the document, and ToJSON of it
		want       doc
	}{
		{"f: 1.0\n", `{"f":1.0}`, doc{F: 1}},
		{"f: 50.0\nl: [1.0, 2.5, 3, 1e3]\n", `{"f":50.0,"l":[1.0,2.5,3,1e3]}`, doc{F: 50, L: []float64{1, 2.5, 3, 1000}}},
		{"fm: {a: -2.0, b: +4.0}\n", `{"fm":{"a":-2.0,"b":4.0}}`, doc{N: map[string]float64{"a": -2, "b": 4}}},
		{"f: 1\ni: 2\n", `{"f":1,"i":2}`, doc{F: 1, I: 2}},
		// Through an alias of a scalar, a mapping or a list, and a merge
		// key (one or a list of them): kept, where the converter puts it.
		{"any: &x 3.0\nf: *x\n", `{"any":3.0,"f":3.0}`, doc{F: 3, Any: 3.0}},
		{"any: &base {f: 4.0}\nfm:\n  <<: *base\n", `{"any":{"f":4.0},"fm":{"f":4.0}}`, doc{N: map[string]float64{"f": 4}, Any: map[string]any{"f": 4.0}}},
		{"any: &base {f: 4.0}\nfm: *base\n", `{"any":{"f":4.0},"fm":{"f":4.0}}`, doc{N: map[string]float64{"f": 4}, Any: map[string]any{"f": 4.0}}},
		{"any: &l [1.0, 2]\nl: *l\n", `{"any":[1.0,2],"l":[1.0,2]}`, doc{L: []float64{1, 2}, Any: []any{1.0, 2.0}}},
		{"any: [&a {f: 1.0}, &b {g: 3.0}]\nfm:\n  <<: [*a, *b]\n  h: 2\n", `{"any":[{"f":1.0},{"g":3.0}],"fm":{"f":1.0,"g":3.0,"h":2}}`,
			doc{N: map[string]float64{"f": 1, "g": 3, "h": 2}, Any: []any{map[string]any{"f": 1.0}, map[string]any{"g": 3.0}}}},
	} {
		j, err := codec.ToJSON([]byte(c.yaml))
		if err != nil || string(j) != c.json {
			t.Errorf("ToJSON(%q) = %s, %v; want %s", c.yaml, j, err, c.json)
		}
		var got doc
		if err := codec.Unmarshal([]byte(c.yaml), &got); err != nil {
			t.Errorf("Unmarshal(%q): %v", c.yaml, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Unmarshal(%q) = %+v, want %+v", c.yaml, got, c.want)
		}
	}
	for _, c := range []struct{ yaml, want string }{
		{"i: 1.0\n", "i: 1.0 is not an integer"},
		{"i: 8e1\n", "i: 8e1 is not an integer"},
		{"m: {a: 2.0}\n", "m.a: 2.0 is not an integer"},
		{"f: &x 3.0\ni: *x\n", "i: 3.0 is not an integer"},
		{"any: &base {a: 2.0}\nm:\n  <<: *base\n", "m.a: 2.0 is not an integer"},
		{"any: &base {a: 2.0}\nm: *base\n", "m.a: 2.0 is not an integer"},
	} {
		var got doc
		err := codec.Unmarshal([]byte(c.yaml), &got)
		if err == nil || err.Error() != c.want {
			t.Errorf("Unmarshal(%q) = %v, want %q", c.yaml, err, c.want)
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

// A document whose aliases nest to expand exponentially ("billion laughs")
// is refused by the walk that follows them, before the converter expands
// it: an error, not minutes of work.
func TestAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	_, err := codec.ToJSON([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases expand to too many nodes") {
		t.Fatalf("ToJSON of nested aliases: %v; want the expansion refused", err)
	}
}
