package balance

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
)

// Sticky cookies are opaque: the value is the instance's id in its cluster,
// base64url(HMAC-SHA256(StickySecret, cluster "\0" addr:port)[:16]) — 22
// characters that neither show the backend's address nor can be made for
// an instance without the secret. Build maps every member's id back to it
// (Cluster.byCookie) for sticky-cookie clusters. A cookie that is not one of
// the ids, or names an instance that is not available, is ignored and a
// fresh one issued (D7).

func (c *Cluster) cookieMAC(addr string) []byte {
	m := hmac.New(sha256.New, c.reg.secret)
	m.Write([]byte(c.name))
	m.Write([]byte{0})
	m.Write([]byte(addr))
	return m.Sum(nil)[:16]
}

// cookieID is the member id of the instance at a.
func (c *Cluster) cookieID(a netip.AddrPort) [16]byte {
	return [16]byte(c.cookieMAC(a.String()))
}

func (c *Cluster) makeCookie(a netip.AddrPort) *http.Cookie { return c.newCookie(c.cookieID(a)) }

func (c *Cluster) newCookie(id [16]byte) *http.Cookie {
	return &http.Cookie{Name: c.cookie, Value: base64.RawURLEncoding.EncodeToString(id[:]), Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

// indexCookies signs group gi's members once, at Build: g.cookies holds
// each member's Set-Cookie (the table is immutable, so a pick issuing one
// allocates nothing), and c.byCookie maps each id back to the first member
// of the cluster at that address.
func (c *Cluster) indexCookies(gi int, g *group) {
	g.cookies = make([]*http.Cookie, len(g.members))
	for mi := range g.members {
		id := c.cookieID(g.members[mi].ep.addr)
		if _, dup := c.byCookie[id]; !dup {
			c.byCookie[id] = memberRef{gi, mi}
		}
		g.cookies[mi] = c.newCookie(id)
	}
}

// parseCookie returns the member a cookie value names.
func (c *Cluster) parseCookie(v string) (memberRef, bool) {
	var id [16]byte
	if base64.RawURLEncoding.DecodedLen(len(v)) != len(id) {
		return memberRef{}, false
	}
	if n, err := base64.RawURLEncoding.Decode(id[:], []byte(v)); err != nil || n != len(id) {
		return memberRef{}, false
	}
	ref, ok := c.byCookie[id]
	return ref, ok
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
	ref, ok := s.c.parseCookie(ck.Value)
	if !ok {
		return nil, 0, false
	}
	g := s.c.subs[ref.group]
	if g.weight <= 0 || !g.currentView().avail[ref.member] {
		return nil, 0, false
	}
	return g, ref.member, true
}
