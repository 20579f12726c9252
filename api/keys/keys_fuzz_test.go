package keys

import (
	"strings"
	"testing"
)

// FuzzKeys: parsers never panic, and every key that parses is exactly the
// key the builder makes from the parsed parts (one spelling per key).
func FuzzKeys(f *testing.F) {
	l := MustNew("")
	for _, s := range []string{
		"/sluice/instances/demo-main/SC1/127.0.0.1:8101",
		"/sluice/instances/demo-main/SC1/[::1]:8101",
		"/sluice/instances/demo-main/SC1/127.0.0.1:08101",
		"/sluice/instances/demo-main/SC1/[fe80::1%eth0]:80",
		"/sluice/instances/demo-main/SC1/[::ffff:10.0.0.1]:80",
		"/sluice/instances/../SC1/127.0.0.1:1",
		"/sluice/instances/a/b/c/127.0.0.1:1",
		"/sluice/status/BFE1/proxy-1", "/sluice/demand/BFE1/proxy-1", "/sluice/status/BFE1/",
		"/sluice/snapshots/BFE1/00000000000000000007", "/sluice/snapshots/BFE1/7",
		"/sluice/snapshots/BFE1/18446744073709551615", "/sluice/snapshots/BFE1/99999999999999999999",
		"/sluice/current/BFE1", "/sluice/current/BFE1/x", "/sluice/current/", "/sluice/current/\x00",
		"/sluice/current/" + strings.Repeat("a", 200), "/other/current/BFE1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if k, err := l.ParseInstance(key); err == nil {
			back, err := l.Instance(k.Cluster, k.SubCluster, k.Addr)
			if err != nil || back != key {
				t.Fatalf("ParseInstance(%q) = %+v, rebuilt %q, %v", key, k, back, err)
			}
		}
		if k, err := l.ParseStatus(key); err == nil {
			back, err := l.Status(k.ProxyCluster, k.ProxyID)
			if err != nil || back != key {
				t.Fatalf("ParseStatus(%q) = %+v, rebuilt %q, %v", key, k, back, err)
			}
		}
		if k, err := l.ParseDemand(key); err == nil {
			back, err := l.Demand(k.ProxyCluster, k.ProxyID)
			if err != nil || back != key {
				t.Fatalf("ParseDemand(%q) = %+v, rebuilt %q, %v", key, k, back, err)
			}
		}
		if k, err := l.ParseSnapshot(key); err == nil {
			back, err := l.Snapshot(k.ProxyCluster, k.Version)
			if err != nil || back != key {
				t.Fatalf("ParseSnapshot(%q) = %+v, rebuilt %q, %v", key, k, back, err)
			}
		}
		if pc, err := l.ParseCurrent(key); err == nil {
			back, err := l.Current(pc)
			if err != nil || back != key {
				t.Fatalf("ParseCurrent(%q) = %q, rebuilt %q, %v", key, pc, back, err)
			}
		}
		if err := ValidName(key); err == nil {
			if len(key) == 0 || len(key) > MaxNameLen || strings.ContainsAny(key, "/\x00") || strings.Contains(key, "..") {
				t.Fatalf("ValidName accepted %q", key)
			}
		}
		if nl, err := New(key); err == nil {
			if !strings.HasPrefix(nl.Root(), "/") || strings.Contains(nl.Prefix(), "//") || strings.Contains(nl.Prefix(), "..") {
				t.Fatalf("New(%q) accepted a bad prefix %q", key, nl.Prefix())
			}
		}
	})
}
