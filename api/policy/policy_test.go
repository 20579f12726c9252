package policy

import (
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func TestParseInstance(t *testing.T) {
	ok := map[string]Instance{
		config.InstanceWRR: {Algo: WRR}, config.InstanceWLC: {Algo: WLC}, config.InstanceWLCRandom: {Algo: WLCRandom},
		config.InstanceP2CEWMA: {Algo: P2CEWMA}, config.InstanceSticky: {Algo: Sticky},
		config.InstanceStickyCookie: {Algo: StickyCookie}, config.InstanceStaticRR: {Algo: StaticRR},
		config.InstanceRoundRobin: {Algo: RoundRobin}, config.InstanceLeastConn: {Algo: LeastConn},
		config.InstanceFirst: {Algo: First}, config.InstanceSource: {Algo: Source},
		"random": {Algo: Random, Choices: 1}, "random(2)": {Algo: Random, Choices: 2}, "random(10)": {Algo: Random, Choices: 10},
	}
	for s, want := range ok {
		got, err := ParseInstance(s)
		if err != nil || got != want {
			t.Errorf("ParseInstance(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	bad := map[string]string{
		"":           `"" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source`,
		"fastest":    `"fastest" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source`,
		"random(1)":  `"random(1)": N in random(N) must be an integer in 2..10`,
		"random(11)": `"random(11)": N in random(N) must be an integer in 2..10`,
		"random(16)": `"random(16)": N in random(N) must be an integer in 2..10`,
		"random(x)":  `"random(x)": N in random(N) must be an integer in 2..10`,
		"random(3":   `"random(3" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source`,
		"WRR":        `"WRR" is not one of wrr, wlc, wlc-random, p2c-ewma, sticky, sticky-cookie, static-rr, roundrobin, leastconn, first, random, random(N), source`,
	}
	for s, want := range bad {
		if _, err := ParseInstance(s); err == nil || err.Error() != want {
			t.Errorf("ParseInstance(%q) error = %v; want %s", s, err, want)
		}
	}
}

func TestParseModeKeyHashType(t *testing.T) {
	for s, want := range map[string]Mode{"consistent": Consistent, "bfe": BFE, "request": Request} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseMode(""); err == nil || err.Error() != `"" is not one of consistent, bfe, request` {
		t.Errorf("ParseMode(\"\") error = %v", err)
	}
	for s, want := range map[string]Key{"client_ip": KeyClientIP, "header": KeyHeader, "header_or_ip": KeyHeaderOrIP, "uri": KeyURI} {
		got, err := ParseKey(s)
		if err != nil || got != want || got.NeedsHeader() != (want == KeyHeader || want == KeyHeaderOrIP) {
			t.Errorf("ParseKey(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseKey("cookie"); err == nil || err.Error() != `"cookie" is not one of client_ip, header, header_or_ip, uri` {
		t.Errorf("ParseKey(cookie) error = %v", err)
	}
	for s, want := range map[string]HashType{"": MapBased, "map-based": MapBased, "consistent": ConsistentHash} {
		if got, err := ParseHashType(s); err != nil || got != want {
			t.Errorf("ParseHashType(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseHashType("ring"); err == nil || err.Error() != `"ring" is not one of map-based, consistent` {
		t.Errorf("ParseHashType(ring) error = %v", err)
	}
}
