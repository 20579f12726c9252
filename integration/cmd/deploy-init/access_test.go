package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/keys"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "access.conf")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseAccess(t *testing.T) {
	p := writeFile(t, `
# comment
role proxy-BFE1
  read current BFE1      # trailing comment
  read snapshots BFE1
  read parts
role own
  readwrite status BFE1 bfe1-p1
  write demand BFE1 bfe1-p1
role agent
  readwrite instances demo-main SC1 10.0.0.1:8080
role sched
  read all
  readwrite election
  readwrite leader
user bfe1-p1 proxy-BFE1 own
user a1 agent
user s1 sched
`)
	a, err := parseAccess(p, keys.MustNew(""))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Perm{
		"proxy-BFE1": {
			{Read: true, Key: "/sluice/current/BFE1", Prefix: true},
			{Read: true, Key: "/sluice/snapshots/BFE1/", Prefix: true},
			{Read: true, Key: "/sluice/parts/", Prefix: true},
		},
		"own": {
			{Read: true, Write: true, Key: "/sluice/status/BFE1/bfe1-p1"},
			{Write: true, Key: "/sluice/demand/BFE1/bfe1-p1"},
		},
		"agent": {{Read: true, Write: true, Key: "/sluice/instances/demo-main/SC1/10.0.0.1:8080"}},
		"sched": {
			{Read: true, Key: "/sluice/", Prefix: true},
			{Read: true, Write: true, Key: "/sluice/election", Prefix: true},
			{Read: true, Write: true, Key: "/sluice/leader"},
		},
	}
	if len(a.Roles) != len(want) {
		t.Fatalf("roles %v, want %d", a.Roles, len(want))
	}
	for r, perms := range want {
		got := a.Roles[r]
		if len(got) != len(perms) {
			t.Fatalf("role %s: %+v, want %+v", r, got, perms)
		}
		for i := range perms {
			if got[i] != perms[i] {
				t.Errorf("role %s perm %d: %+v, want %+v", r, i, got[i], perms[i])
			}
		}
	}
	if strings.Join(a.Order, ",") != "bfe1-p1,a1,s1" {
		t.Errorf("users %v", a.Order)
	}
	if strings.Join(a.Users["bfe1-p1"], ",") != "proxy-BFE1,own" {
		t.Errorf("bfe1-p1 roles %v", a.Users["bfe1-p1"])
	}
}

func TestParseAccessErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"read parts\n", ":1: permission \"read\" outside a role block"},
		{"role r\n  read nowhere\n", ":2: unknown key kind \"nowhere\""},
		{"role r\n  read parts x\n", ":2: kind \"parts\" takes at most 0 names"},
		{"role r\n  read instances c s\n", ":2: kind instances takes no names or <cluster> <subcluster> <ip:port>"},
		{"role r\n  read instances c s host:80\n", `:2: instances address "host:80"`},
		{"role r\n  read status BFE1 ../x\n", ":2: "},
		{"role r\nuser u r\nuser u r\n", `:3: user "u" declared twice`},
		{"user u missing\n", `user "u" has undeclared role "missing"`},
		{"user ../u r\n", ":1: user: "},
		{"grant x\n", `:1: unknown directive "grant"`},
		{"role\n", ":1: want \"role <name>\""},
	} {
		_, err := parseAccess(writeFile(t, tc.body), keys.MustNew(""))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.body, err, tc.want)
		}
	}
}

// The access file shipped with the compose fleet parses, and every user of
// it has a role.
func TestComposeAccessFile(t *testing.T) {
	a, err := parseAccess(filepath.Join("..", "..", "..", "deploy", "compose", "access.conf"), keys.MustNew(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"scheduler1", "scheduler2", "operator", "bfe1-p1", "bfe2-p2", "agent-sc1-1", "agent-sc2-3"} {
		if len(a.Users[u]) == 0 {
			t.Errorf("user %s missing from the compose access file", u)
		}
	}
}
