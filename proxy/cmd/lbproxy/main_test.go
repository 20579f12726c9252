package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// Issue 17.4: --bfe-conf alone parses (no "Required flag proxy-cluster");
// what fails here is the missing directory, named.
func TestBFEConfNeedsNoProxyClusterFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	err := newApp().Run([]string{"lbproxy", "--bfe-conf", dir, "--access-log", "off"})
	if err == nil || strings.Contains(err.Error(), "Required flag") || !strings.Contains(err.Error(), "--bfe-conf") {
		t.Fatalf("lbproxy --bfe-conf %s: %v, want the directory's error, not a missing flag", dir, err)
	}
}
