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

// testdata is the repository's own BFE-format fixtures (testdata/bfe at the
// repository root): conf/ is a complete BFE conf directory, files/ holds one
// file per case for each loader, valid and invalid (testdata/bfe/README.md).
func testdata(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "bfe")
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("BFE fixtures missing at %s (testdata/bfe in the repository): %v", dir, err)
	}
	return dir
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

// TestEveryFixture loads every file under testdata/bfe with the loader for
// its format and checks the verdict BFE gives such a file (its own loaders
// accept or reject the same constructs), or ours where we are stricter. A
// file on disk missing from the table fails.
func TestEveryFixture(t *testing.T) {
	root := testdata(t)
	const doc = "" // README: not a BFE file
	table := map[string]struct {
		load    loader
		wantErr string // "" = accepted; else a substring of the error
	}{
		"README.md": {nil, doc},

		"files/gslb_parts/backends.data":            {loadBackends, ""},
		"files/gslb_parts/weights_one_pool.data":    {loadGSLBRow, ""},
		"files/gslb_parts/weights_split.data":       {loadGSLBRow, ""},
		"files/gslb_parts/basic_colon_missing.data": {loadGslbBasic, "HashConf.SessionSticky: invalid JSON near line 7"},
		"files/gslb_parts/basic.data":               {loadGslbBasic, ""},

		"files/cluster_table/lowercase_keys.data": {loadClusterTable, ""},
		"files/cluster_table/shared_address.data": {loadClusterTable, ""},
		// BFE keeps the last of the duplicated keys; we are stricter.
		"files/gslb/duplicate_key.data":  {loadGSLB, `Clusters.cart.cart.pool.a: duplicate key "cart.pool.a": BFE silently keeps the last value; Sluice is stricter`},
		"files/gslb/lowercase_keys.data": {loadGSLB, ""},
		"files/gslb/missing_comma.data":  {loadGSLB, "invalid JSON near line 13"},

		"files/cluster_conf/unknown_field_slow_start.conf": {loadClusterConf, ""},
		"files/cluster_conf/truncated.conf":                {loadClusterConf, "the JSON is incomplete"},
		"files/cluster_conf/tcp_check.conf":                {loadClusterConf, ""},
		"files/cluster_conf/udp_scheme.conf":               {loadClusterConf, `Config.search.CheckConf.Schem: "udp" is not a health check scheme`},
		"files/cluster_conf/http_check_without_uri.conf":   {loadClusterConf, ""},
		"files/cluster_conf/status_code_out_of_range.conf": {loadClusterConf, "Config.orders.CheckConf.StatusCode: 1000 is not a status code"},

		"files/host_rule/two_products.data":   {loadHostRule, ""},
		"files/host_rule/tag_not_a_list.data": {loadHostRule, `HostTags.orders: "ordersHosts" is not a list`},

		"files/route_rule/basic_star_host_and_prefixes.data": {loadRouteRule, ""},
		"files/route_rule/basic_rule_matches_nothing.data":   {loadRouteRule, "BasicRule.shop[0]: neither Hostname nor Path is set"},
		"files/route_rule/basic_and_product_rules.data":      {loadRouteRule, ""},
		"files/route_rule/wildcard_inside_label.data":        {loadRouteRule, `Hostname[0]: "*shop.example.com": a wildcard host must be * or start with *.`},
		"files/route_rule/wildcard_after_label.data":         {loadRouteRule, `"shop*.example.com": a wildcard host must be`},
		"files/route_rule/two_wildcards_in_host.data":        {loadRouteRule, `"*.*.example.com": only one * is allowed in a host name`},
		"files/route_rule/two_wildcards_in_path.data":        {loadRouteRule, `Path[0]: "/cart/*/*": only one * is allowed in a path`},
		"files/route_rule/product_rules.data":                {loadRouteRule, ""},

		"files/session_sticky/ok.data":                   {loadSessionSticky, ""},
		"files/session_sticky/mask_code_too_short.data":  {loadSessionSticky, `Config.checkout[0].MaskCode: "k7f" is shorter than 4 characters`},
		"files/session_sticky/max_age_not_a_number.data": {loadSessionSticky, `Config.checkout[0].MaxAge: "forever" is not an integer`},
		"files/session_sticky/missing_comma.data":        {loadSessionSticky, "invalid JSON near line 15"},

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
	cc, err := LoadClusterConf(filepath.Join(testdata(t), "files/cluster_conf/unknown_field_slow_start.conf"))
	if err != nil {
		t.Fatal(err)
	}
	want := "Config.orders.CheckConf.Response: unknown field ignored (BFE ignores it too)"
	found := false
	for _, w := range cc.Warnings {
		found = found || strings.HasSuffix(w, want)
	}
	if !found {
		t.Fatalf("warnings %q lack %q", cc.Warnings, want)
	}
	p := cc.Policies["orders"]
	if p.SlowStart.Window.D().Seconds() != 30 || p.Timeouts.Connect.D().Milliseconds() != 1000 ||
		p.Health.FailNum != 3 || p.Retry.RetryMax != 3 || p.Retry.CrossRetry != 1 || p.Health.Probe.Path != "/healthz" {
		t.Fatalf("orders policy: %+v", p)
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
