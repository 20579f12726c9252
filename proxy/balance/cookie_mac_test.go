package balance

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// D7: a sticky cookie that is well-formed (base64url address "." base64url
// MAC) and names an available instance, but whose MAC is not the one this
// proxy computes for this cluster and address, is ignored and a fresh
// cookie issued. TestStickyCookie's forgery reuses another address's MAC;
// these are the MACs a mutant that drops part of the check would accept.
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
	p, err := check(b64([]byte(addr)) + "." + b64(good))
	if err != nil || p.Reason() != "cookie" || p.Endpoint().Addr() != target || p.SetCookie() != nil {
		t.Fatalf("the correctly signed cookie: %v reason %q → %v, cookie %v; want %v by cookie", err, p.Reason(), p.Endpoint().Addr(), p.SetCookie(), target)
	}
	p.Done(Result{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := check(b64([]byte(addr)) + "." + b64(tc.mac))
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
