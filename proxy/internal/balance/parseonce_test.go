package balance

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// TestCompileAgreesWithValidate: the balance compile and api/validate parse
// the policy strings with the same parser (api/policy), so a snapshot
// compiles exactly when it validates. random(N) was 1..16 here and 2..10
// in validate.
func TestCompileAgreesWithValidate(t *testing.T) {
	cases := []struct {
		field, value string
		ok           bool
	}{
		{"instance", "random", true}, {"instance", "random(2)", true}, {"instance", "random(10)", true},
		{"instance", "random(1)", false}, {"instance", "random(11)", false}, {"instance", "random(16)", false},
		{"instance", "", false}, {"instance", "fastest", false},
		{"instance", "ring_hash", true}, {"instance", "uri whole", true}, {"instance", "hdr(X-User)", true}, {"instance", "url_param(id)", true},
		{"instance", "hdr(a b)", false}, {"instance", "url_param(a=b)", false}, {"instance", "hdr()", false},
		{"mode", "bfe", true}, {"mode", "request", true}, {"mode", "", false}, {"mode", "modulo", false},
		{"key", "uri", true}, {"key", "", false}, {"key", "cookie", false},
		{"hash_type", "", true}, {"hash_type", "consistent", true}, {"hash_type", "ring", false},
	}
	for _, c := range cases {
		pol := policy(func(p *config.Policy) {
			switch c.field {
			case "instance":
				p.Balance.Instance = c.value
			case "mode":
				p.Balance.SubclusterMode = c.value
			case "key":
				p.Balance.Hash.Key = c.value
			case "hash_type":
				p.Balance.HashType = c.value
			}
		})
		s := snap(1, pol, 0, sc{name: "SC1", weight: 100, weights: []int{1}})
		s.Meta.Hash = snapshot.ContentHash(s)
		verr := validate.Snapshot(s)
		_, berr := build(s, NewRegistry(RegistryOptions{}))
		if (verr == nil) != c.ok || (berr == nil) != c.ok {
			t.Errorf("%s %q: validate %v, compile %v; want ok=%v from both", c.field, c.value, verr, berr, c.ok)
			continue
		}
		if !c.ok && c.value != "" {
			// Both name the value and the rule in the same words.
			want := strings.SplitN(verr.Error(), ": ", 2)[1]
			if !strings.Contains(berr.Error(), want) {
				t.Errorf("%s %q: compile error %q does not carry validate's %q", c.field, c.value, berr, want)
			}
		}
	}
}

func TestBuildRejectsZeroChecked(t *testing.T) {
	if _, err := Build(validate.Checked{}, NewRegistry(RegistryOptions{})); err == nil || !strings.Contains(err.Error(), "nil snapshot") {
		t.Fatalf("Build(zero Checked) = %v; want the nil-snapshot error", err)
	}
}
