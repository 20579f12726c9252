package scenario

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestExampleTableGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(raw)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.Render(&buf, "table"); err != nil {
		t.Fatal(err)
	}
	const golden = "testdata/example.table.golden"
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != string(want) {
		t.Fatalf("table output differs from %s (run with -update to accept):\n%s", golden, got)
	}
}

func TestExampleOutcome(t *testing.T) {
	raw, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(raw)
	if err != nil {
		t.Fatal(err)
	}
	// Capacity: SC1 640, SC2 400 (one instance down). Demand 1200 > 1040:
	// overload, 160 rps dropped from BFE1 (optimum 71/11/18); the max step
	// of 10 points from the previous 90/10/0 gives 80/11/9.
	r1 := rep.Result.Snapshots["BFE1"].Clusters["demo-main"].Row.Weights
	if r1["SC1"] != 80 || r1["SC2"] != 11 || r1[config.Blackhole] != 9 {
		t.Fatalf("BFE1 demo-main row %v", r1)
	}
	// demo-static: no demand known; BFE2's row carries the shift.
	e := rep.Result.Snapshots["BFE2"].Clusters["demo-static"].Explanation
	if e.Mode != "capacity-proportional" || !strings.Contains(strings.Join(e.Notes, "\n"), "shift drill-1: moved 20 points") {
		t.Fatalf("BFE2 demo-static explanation %+v", e)
	}
	var buf bytes.Buffer
	if err := rep.Render(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	var back JSONReport
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Clusters) != 2 || back.Clusters[0].Name != "demo-main" || len(back.Clusters[0].Rows) != 2 {
		t.Fatalf("json report %+v", back)
	}
	if err := rep.Render(&buf, "xml"); !errors.Is(err, ErrFormat) {
		t.Fatalf("render xml: %v, want ErrFormat", err)
	}
}

func TestBadScenarios(t *testing.T) {
	base, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, from, to, want string
	}{
		{"unknown field", "demand:\n", "demnad:\n", "demnad"},
		{"negative demand", "BFE2: {demo-main: 300}", "BFE2: {demo-main: -3}", "demand.BFE2.demo-main: -3 is not a finite number ≥ 0"},
		{"unknown proxy cluster", "BFE2: {demo-main: 300}", "BFE9: {demo-main: 300}", "demand.BFE9: proxy cluster \"BFE9\" is not in topology.proxy_clusters"},
		{"wrong type", "applied_percent: 20", "applied_percent: 1.5", "applied_percent"},
		{"shift on unknown cluster", "cluster: demo-static, from", "cluster: nope, from", "shifts[0].shift.cluster: \"nope\" is not in clusters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := strings.Replace(string(base), tc.from, tc.to, 1)
			if raw == string(base) {
				t.Fatalf("replacement %q not found", tc.from)
			}
			_, err := Run([]byte(raw))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
