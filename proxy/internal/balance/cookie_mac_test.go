package balance

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// D7: a sticky cookie is the instance's opaque id, base64url(MAC over
// (cluster, address)); a value that is not the MAC this proxy computes for
// this cluster and an available instance's address is ignored and a fresh
// cookie issued. These are the MACs a mutant that drops part of the check
// would accept.
func TestStickyCookieWrongMAC(t *testing.T) {
	e := newEnv(t, snap(1, modePolicy(config.InstanceStickyCookie), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}}))
	c := e.cluster()
	target := inst(1, 0)
	addr := target.String()
	mac := func(key []byte, parts ...string) []byte {
		m := hmac.New(sha256.New, key)
		for i, p := range parts {
			if i > 0 {
				m.Write([]byte{0})
			}
			m.Write([]byte(p))
		}
		return m.Sum(nil)
	}
	good := c.cookieMAC(addr)
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 0x01
	b64 := base64.RawURLEncoding.EncodeToString
	cases := []struct {
		name string
		mac  []byte
	}{
		{"one bit flipped", flipped},
		// Signed by this code for another secret or another cluster: a
		// mutant that leaves either out of the MAC accepts these.
		{"another proxy's secret", (&Cluster{name: c.name, reg: &Registry{secret: []byte("other-secret")}}).cookieMAC(addr)},
		{"another cluster's name", (&Cluster{name: c.name + "-other", reg: c.reg}).cookieMAC(addr)},
		{"no cluster name", mac(c.reg.secret, addr)[:16]},
		{"the whole 32-byte MAC", mac(c.reg.secret, c.name, addr)},
		{"the first 15 bytes", good[:15]},
		{"empty", nil},
		{"all zero", make([]byte, 16)},
	}
	// The well-formed cookie with the right MAC is honoured: the cases below
	// differ from it only in the MAC.
	check := func(value string) (Pick, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		req.AddCookie(&http.Cookie{Name: c.cookie, Value: value})
		s := c.NewSelection(req, netip.Addr{})
		defer s.Release()
		return s.Next()
	}
	p, err := check(b64(good))
	if err != nil || p.Reason() != "cookie" || p.Endpoint().Addr() != target || p.SetCookie() != nil {
		t.Fatalf("the correctly signed cookie: %v reason %q → %v, cookie %v; want %v by cookie", err, p.Reason(), p.Endpoint().Addr(), p.SetCookie(), target)
	}
	p.Done(Result{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := check(b64(tc.mac))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Done(Result{})
			if p.Reason() == "cookie" || p.SetCookie() == nil {
				t.Fatalf("cookie for %s with a wrong MAC (%s) honoured: reason %q, new cookie %v", addr, tc.name, p.Reason(), p.SetCookie())
			}
		})
	}
}

// Issue 17: sticky cookies are opaque — an HMAC'd instance id, never the
// backend address (plain or encoded) — and a cookie of the old
// "address.MAC" form is not honoured.
func TestStickyCookieIsOpaque(t *testing.T) {
	e := newEnv(t, snap(1, modePolicy(config.InstanceStickyCookie), 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1}}))
	c := e.cluster()
	for i := range 3 {
		a := inst(1, i)
		v := c.makeCookie(a).Value
		for _, leak := range []string{a.String(), a.Addr().String(), base64.RawURLEncoding.EncodeToString([]byte(a.String())),
			base64.StdEncoding.EncodeToString([]byte(a.String()))} {
			if len(v) != 22 || strings.Contains(v, leak) || strings.Contains(v, leak[:len(leak)-2]) {
				t.Fatalf("cookie %q for %s: want 22 opaque characters, not containing %q", v, a, leak)
			}
		}
		ref, ok := c.parseCookie(v)
		if !ok || c.subs[ref.group].members[ref.member].ep.Addr() != a {
			t.Fatalf("cookie %q does not name %s back", v, a)
		}
	}
	old := base64.RawURLEncoding.EncodeToString([]byte(inst(1, 0).String())) + "." + base64.RawURLEncoding.EncodeToString(c.cookieMAC(inst(1, 0).String()))
	if _, ok := c.parseCookie(old); ok {
		t.Fatalf("the address-bearing cookie %q was honoured", old)
	}
}
