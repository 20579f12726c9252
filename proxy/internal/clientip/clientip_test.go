package clientip

import (
	"net/netip"
	"testing"
)

func TestResolve(t *testing.T) {
	ps, err := ParseTrusted([]string{"10.0.0.0/8", " 127.0.0.1 "})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"192.0.2.7", []string{"6.6.6.6"}, "192.0.2.7"},                            // untrusted peer: XFF ignored
		{"127.0.0.1", []string{"6.6.6.6, 198.51.100.9, 10.1.1.1"}, "198.51.100.9"}, // right-most untrusted
		{"127.0.0.1", []string{"6.6.6.6", "10.2.2.2"}, "6.6.6.6"},                  // several header lines
		{"127.0.0.1", []string{"bogus, 10.1.1.1"}, "10.1.1.1"},                     // unparsable: stop at the last trusted hop
		{"127.0.0.1", nil, "127.0.0.1"},
	} {
		if got := Resolve(netip.MustParseAddr(c.peer), c.xff, ps); got.String() != c.want {
			t.Errorf("Resolve(%s, %q) = %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	if _, err := ParseTrusted([]string{"10.0.0.0/33"}); err == nil {
		t.Error("10.0.0.0/33 accepted")
	}
	if _, err := ParseTrusted([]string{"not-an-ip"}); err == nil || err.Error() != `trusted proxy [0] "not-an-ip": not a CIDR or an IP address` {
		t.Errorf("bad entry: %v", err)
	}
}
