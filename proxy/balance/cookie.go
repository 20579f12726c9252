package balance

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strings"
)

// Sticky cookies name an instance and are HMAC-SHA256 signed with the
// registry's StickySecret over (cluster, address): value =
// base64url(addr) "." base64url(mac[:16]). A cookie that does not verify,
// names an unknown address or an instance that is not available is ignored
// and a fresh one issued (D7).

func (c *Cluster) cookieMAC(addr string) []byte {
	m := hmac.New(sha256.New, c.reg.secret)
	m.Write([]byte(c.name))
	m.Write([]byte{0})
	m.Write([]byte(addr))
	return m.Sum(nil)[:16]
}

func (c *Cluster) makeCookie(a netip.AddrPort) *http.Cookie {
	s := a.String()
	v := base64.RawURLEncoding.EncodeToString([]byte(s)) + "." + base64.RawURLEncoding.EncodeToString(c.cookieMAC(s))
	return &http.Cookie{Name: c.cookie, Value: v, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

// parseCookie verifies v and returns the address it names.
func (c *Cluster) parseCookie(v string) (netip.AddrPort, bool) {
	a, m, ok := strings.Cut(v, ".")
	if !ok {
		return netip.AddrPort{}, false
	}
	ab, err1 := base64.RawURLEncoding.DecodeString(a)
	mb, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(mb, c.cookieMAC(string(ab))) {
		return netip.AddrPort{}, false
	}
	addr, err := netip.ParseAddrPort(string(ab))
	return addr, err == nil
}

// cookieTarget returns the instance a valid sticky cookie names, when it is
// available in a sub-cluster with row weight > 0.
func (s *Selection) cookieTarget() (*group, int, bool) {
	if s.req == nil {
		return nil, 0, false
	}
	ck, err := s.req.Cookie(s.c.cookie)
	if err != nil {
		return nil, 0, false
	}
	addr, ok := s.c.parseCookie(ck.Value)
	if !ok {
		return nil, 0, false
	}
	ref, ok := s.c.byAddr[addr]
	if !ok {
		return nil, 0, false
	}
	g := s.c.subs[ref.group]
	if g.weight <= 0 || !g.currentView().avail[ref.member] {
		return nil, 0, false
	}
	return g, ref.member, true
}
