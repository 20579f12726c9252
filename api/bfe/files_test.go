package bfe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sharedTestdata finds ../shared/bfe-testdata beside the repository root (the
// directory holding go.work), as CI lays it out.
func sharedTestdata(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot find the repository root (a directory with go.work) above the package directory")
		}
		dir = parent
	}
	shared := filepath.Join(dir, "..", "shared", "bfe-testdata")
	if _, err := os.Stat(filepath.Join(shared, "README.md")); err != nil {
		t.Fatalf("BFE test data missing: want %s (the shared/ folder beside the repository root): %v", shared, err)
	}
	return shared
}

type loader func(path string) error

var (
	loadClusterConf   loader = func(p string) error { _, err := LoadClusterConf(p); return err }
	loadClusterTable  loader = func(p string) error { _, err := LoadClusterTable(p); return err }
	loadGSLB          loader = func(p string) error { _, err := LoadGSLB(p); return err }
	loadHostRule      loader = func(p string) error { _, err := LoadHostRule(p); return err }
	loadRouteRule     loader = func(p string) error { _, err := LoadRouteRule(p); return err }
	loadNameConf      loader = func(p string) error { _, err := LoadNameConf(p); return err }
	loadBackends      loader = func(p string) error { _, err := LoadClusterBackends(p); return err }
	loadGSLBRow       loader = func(p string) error { _, err := LoadGSLBRow(p); return err }
	loadGslbBasic     loader = func(p string) error { _, err := LoadGslbBasic(p); return err }
	loadSessionSticky loader = func(p string) error { _, err := LoadSessionSticky(p); return err }
)

// TestEverySharedFile loads every file under shared/bfe-testdata with the
// loader for its format and checks BFE's own verdict (from BFE's unit tests),
// or ours where we are stricter. A file on disk missing from the table fails.
func TestEverySharedFile(t *testing.T) {
	root := sharedTestdata(t)
	const doc = "" // README: not a BFE file
	table := map[string]struct {
		load    loader
		wantErr string // "" = accepted; else a substring of the error
	}{
		"README.md": {nil, doc},

		"bfe_balance/bal_gslb/testdata/cluster1": {loadBackends, ""},
		"bfe_balance/bal_gslb/testdata/cluster2": {loadBackends, ""},
		"bfe_balance/bal_gslb/testdata/g1":       {loadGSLBRow, ""},
		"bfe_balance/bal_gslb/testdata/g2":       {loadGSLBRow, ""},
		"bfe_balance/bal_gslb/testdata/gb1":      {loadGslbBasic, "invalid JSON near line 6"},
		"bfe_balance/bal_gslb/testdata/gb2":      {loadGslbBasic, ""},

		"bfe_balance/testdata/bal_table/case1/cluster_table.data": {loadClusterTable, ""},
		// BFE keeps the last of the duplicated keys; we are stricter.
		"bfe_balance/testdata/bal_table/case1/gslb.data":          {loadGSLB, `Clusters.cluster_c1.c1-example.a: duplicate key "c1-example.a": BFE silently keeps the last value; Sluice is stricter`},
		"bfe_balance/testdata/bal_table/case2/cluster_table.data": {loadClusterTable, ""},
		"bfe_balance/testdata/bal_table/case2/gslb.data":          {loadGSLB, `duplicate key "c1-example.a"`},

		"bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_1.conf": {loadClusterConf, ""},
		"bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_2.conf": {loadClusterConf, "the JSON is incomplete"},
		"bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_3.conf": {loadClusterConf, ""},
		"bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_4.conf": {loadClusterConf, `Config.p2.CheckConf.Schem: "udp" is not a health check scheme`},
		"bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_5.conf": {loadClusterConf, ""},
		"bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_6.conf": {loadClusterConf, "Config.p1.CheckConf.StatusCode: 1000 is not a status code"},

		"bfe_config/bfe_cluster_conf/cluster_table_conf/testdata/cluster_table_1.conf": {loadClusterTable, ""},
		"bfe_config/bfe_cluster_conf/gslb_conf/testdata/gslb_1.data":                   {loadGSLB, ""},
		"bfe_config/bfe_cluster_conf/gslb_conf/testdata/gslb_2.data":                   {loadGSLB, "invalid JSON near line 66"},

		"bfe_config/bfe_route_conf/host_rule_conf/testdata/host_table_1.conf": {loadHostRule, ""},
		"bfe_config/bfe_route_conf/host_rule_conf/testdata/host_table_2.conf": {loadHostRule, `HostTags.C: "C" is not a list`},

		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule1.data": {loadRouteRule, ""},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule2.data": {loadRouteRule, "BasicRule.example_product[0]: neither Hostname nor Path is set"},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule3.data": {loadRouteRule, ""},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule4.data": {loadRouteRule, `Hostname[0]: "*abc.a.com": a wildcard host must be * or start with *.`},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule5.data": {loadRouteRule, `"abc*.a.com": a wildcard host must be`},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule6.data": {loadRouteRule, `"*.*.a.com": only one * is allowed in a host name`},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/basic_route_rule7.data": {loadRouteRule, `Path[0]: "/a/*/*": only one * is allowed in a path`},
		"bfe_config/bfe_route_conf/route_rule_conf/testdata/route_rule.data":        {loadRouteRule, ""},

		"bfe_modules/mod_session_sticky/test_data/mod_session_sticky.data":       {loadSessionSticky, ""},
		"bfe_modules/mod_session_sticky/test_data/mod_session_sticky_err.data":   {loadSessionSticky, `Config.unittest[0].MaskCode: "a11" is shorter than 4 characters`},
		"bfe_modules/mod_session_sticky/test_data/mod_session_sticky_err_1.data": {loadSessionSticky, `Config.unittest[0].MaxAge: "abc" is not an integer`},
		"bfe_modules/mod_session_sticky/test_data/mod_session_sticky_err_2.data": {loadSessionSticky, "invalid JSON near line 14"},

		"conf/cluster_conf/cluster_table.data":    {loadClusterTable, ""},
		"conf/cluster_conf/gslb.data":             {loadGSLB, ""},
		"conf/server_data_conf/cluster_conf.data": {loadClusterConf, ""},
		"conf/server_data_conf/host_rule.data":    {loadHostRule, ""},
		"conf/server_data_conf/name_conf.data":    {loadNameConf, ""},
		"conf/server_data_conf/route_rule.data":   {loadRouteRule, ""},
	}
	var onDisk []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		onDisk = append(onDisk, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(onDisk)
	seen := map[string]bool{}
	for _, rel := range onDisk {
		seen[rel] = true
		tc, ok := table[rel]
		if !ok {
			t.Errorf("%s is in the test data but not in this table: add its expected outcome", rel)
			continue
		}
		if tc.load == nil {
			continue
		}
		t.Run(rel, func(t *testing.T) {
			err := tc.load(filepath.Join(root, filepath.FromSlash(rel)))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want accepted, got %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("want rejected with %q, got accepted", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			case err != nil && !strings.Contains(err.Error(), rel):
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
	for rel := range table {
		if !seen[rel] {
			t.Errorf("%s is in the table but not on disk", rel)
		}
	}
}

func TestLoadErrorsNameFileAndPath(t *testing.T) {
	var fe *FileError
	_, err := LoadClusterConf(filepath.Join(t.TempDir(), "missing.data"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: got %v, want fs.ErrNotExist", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "cluster_table.data")
	write(t, p, `{"Version":"1","Config":{"c":{"s":[{"Name":"a","Addr":"10.0.0.1","Port":80,"Weight":-3},{"Name":"b","Addr":"10.0.0.2","Port":80,"Weight":5}]}}}`)
	_, err = LoadClusterTable(p)
	if !errors.As(err, &fe) || fe.Path != "Config.c.s[0].Weight" ||
		fe.Msg != "-3 is negative: BFE treats it as a backend that is never picked; Sluice rejects it (use 0)" {
		t.Fatalf("negative instance weight: got %#v", err)
	}
	write(t, p, `{"Version":"1","Config":{"c":{"s":[{"Name":"a","Addr":"10.0.0.1","Port":80,"Weight":1.5}]}}}`)
	_, err = LoadClusterTable(p)
	if !errors.As(err, &fe) || fe.Path != "Config.c.s[0].Weight" || !strings.Contains(fe.Msg, "1.5 is not an integer") {
		t.Fatalf("fractional weight: got %v", err)
	}
	write(t, p, `{"Version":"1","Config":{"c":{"s":[{"Name":"a","Addr":"backend.example","Port":80,"Weight":1}]}}}`)
	if _, err = LoadClusterTable(p); err == nil || !strings.Contains(err.Error(), `"backend.example" is not an IP address`) {
		t.Fatalf("host name address: got %v", err)
	}
	write(t, p, `{"Config":{}}`)
	if _, err = LoadClusterTable(p); err == nil || err.Error() != p+": Version: missing (BFE rejects the file too)" {
		t.Fatalf("missing version: got %v", err)
	}
}

func TestUnknownFieldsWarn(t *testing.T) {
	root := sharedTestdata(t)
	cc, err := LoadClusterConf(filepath.Join(root, "bfe_config/bfe_cluster_conf/cluster_conf/testdata/cluster_conf_1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := "Config.p1.CheckConf.Response: unknown field ignored (BFE ignores it too)"
	found := false
	for _, w := range cc.Warnings {
		found = found || strings.HasSuffix(w, want)
	}
	if !found {
		t.Fatalf("warnings %q lack %q", cc.Warnings, want)
	}
	p1 := cc.Policies["p1"]
	if p1.SlowStart.Window.D().Seconds() != 30 || p1.Timeouts.Connect.D().Milliseconds() != 1000 ||
		p1.Health.FailNum != 3 || p1.Retry.RetryMax != 3 || p1.Retry.CrossRetry != 1 || p1.Health.Probe.Path != "/health" {
		t.Fatalf("p1 policy: %+v", p1)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
