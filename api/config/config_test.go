package config_test

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/validate"
)

func TestDurationJSON(t *testing.T) {
	d := config.Duration(1500 * time.Millisecond)
	b, err := json.Marshal(d)
	if err != nil || string(b) != `"1.5s"` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back config.Duration
	if err := json.Unmarshal(b, &back); err != nil || back != d {
		t.Fatalf("Unmarshal = %v, %v", back, err)
	}
	for in, want := range map[string]string{
		`2`:      `duration 2 must be a string with a unit, like "2s" or "500ms"`,
		`"2"`:    `duration "2": must be a number with a unit (ns, us, ms, s, m, h), like "2s"`,
		`"-1s"`:  `duration "-1s" must not be negative`,
		`"2 s"`:  `duration "2 s": must be a number with a unit (ns, us, ms, s, m, h), like "2s"`,
		`"1.5x"`: `duration "1.5x": must be a number with a unit (ns, us, ms, s, m, h), like "2s"`,
	} {
		var d config.Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil || err.Error() != want {
			t.Errorf("Unmarshal(%s) = %v, want %q", in, err, want)
		}
	}
}

// TestDefaultsAreValid: the documented defaults pass the validator.
func TestDefaultsAreValid(t *testing.T) {
	s := config.State{
		Topology: config.Topology{IDCs: []string{"IDC1"}, ProxyClusters: map[string]config.ProxyCluster{"BFE1": {IDC: "IDC1"}}},
		Clusters: map[string]config.Cluster{"c": {
			SubClusters: map[string]config.SubCluster{"SC1": {IDC: "IDC1"}},
			Policy:      config.DefaultPolicy(),
		}},
		Scheduler: config.DefaultSchedulerSettings(),
	}
	if err := validate.State(&s); err != nil {
		t.Fatalf("defaults are invalid:\n%v", err)
	}
	// A document that leaves everything out decodes to exactly the defaults.
	var d config.State
	doc := `{"topology":{"idcs":["IDC1"],"proxy_clusters":{"BFE1":{"idc":"IDC1"}}},"clusters":{"c":{"subclusters":{"SC1":{"idc":"IDC1"}}}}}`
	if err := codec.Unmarshal([]byte(doc), &d); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, s) {
		t.Errorf("decoded %+v\nwant     %+v", d, s)
	}
}

// TestDocsListEveryField: docs/config.md names every JSON field of the
// desired state, so a new field cannot ship undocumented.
func TestDocsListEveryField(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	seen := map[reflect.Type]bool{}
	var walk func(tp reflect.Type, path string)
	walk = func(tp reflect.Type, path string) {
		for tp.Kind() == reflect.Pointer || tp.Kind() == reflect.Slice || tp.Kind() == reflect.Map {
			tp = tp.Elem()
		}
		if tp.Kind() != reflect.Struct || seen[tp] || tp == reflect.TypeOf(time.Time{}) {
			return
		}
		seen[tp] = true
		for i := 0; i < tp.NumField(); i++ {
			f := tp.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			// Table rows write fields as `name`, `a.name` or `name` / `other`.
			if !strings.Contains(text, "`"+name+"`") && !strings.Contains(text, "."+name+"`") && !strings.Contains(text, "`"+name+" ") && !strings.Contains(text, "`"+name+".") {
				t.Errorf("docs/config.md does not document %s.%s (`%s`)", path, f.Name, name)
			}
			walk(f.Type, path+"."+f.Name)
		}
	}
	walk(reflect.TypeOf(config.State{}), "State")
}
