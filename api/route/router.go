// Package route is BFE's condition language and the router built on it:
// a request's Host selects a product, the product's ordered rules select a
// backend cluster. Conditions are parsed once (Parse, Compile) into an
// immutable form whose evaluation allocates nothing per rule.
package route

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/api/config"
)

// Result is the outcome of routing one request.
type Result struct {
	Product string
	// RuleName is the rule's name, or its index when it has none.
	RuleName  string
	RuleIndex int
	Cluster   string
}

// Router maps requests to clusters. It is immutable and safe for
// concurrent use; build a new one for a new configuration.
type Router struct {
	hosts    map[string]*product // lower-case host → product
	hostLens uint64              // bit min(len, 63) set for each key of hosts
	def      *product
	clusters []string
}

type product struct {
	name  string
	rules []rule
}

type rule struct {
	name    string
	cond    *Cond
	cluster string
}

// Compile builds a router from products (keyed by name) and the product for
// hosts that match no other (""for none). Every condition must parse, every
// product's rule list must end with default_t(), hosts must be unique
// (case-insensitive) across products. All problems are reported, each with
// its path (products.demo.rules[2].cond: column 5: ...).
func Compile(products map[string]config.Product, defaultProduct string) (*Router, error) {
	rt := &Router{hosts: map[string]*product{}}
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	owner := map[string]string{}
	clusters := map[string]bool{}
	names := make([]string, 0, len(products))
	for n := range products {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		src := products[name]
		path := "products." + name
		p := &product{name: name, rules: make([]rule, 0, len(src.Rules))}
		for i, h := range src.Hosts {
			key, err := NormalizeHost(h)
			if err != nil {
				bad(fmt.Sprintf("%s.hosts[%d]", path, i), "%v", err)
				continue
			}
			if o, dup := owner[key]; dup {
				bad(fmt.Sprintf("%s.hosts[%d]", path, i), "host %q is already used by product %q", h, o)
				continue
			}
			owner[key] = name
			rt.hosts[key] = p
			rt.hostLens |= hostLenBit(key)
		}
		if len(src.Rules) == 0 {
			bad(path+".rules", "is empty; want at least a default rule (cond \"default_t()\")")
		}
		for i, r := range src.Rules {
			rp := fmt.Sprintf("%s.rules[%d]", path, i)
			c, err := Parse(r.Cond)
			if err != nil {
				bad(rp+".cond", "%v", err)
				continue
			}
			if r.Cluster == "" {
				bad(rp+".cluster", "is empty; want a cluster name")
			}
			if i == len(src.Rules)-1 && !c.IsDefault() {
				bad(rp+".cond", "%q is the last rule's condition; the last rule must be the default rule \"default_t()\"", truncate(r.Cond))
			}
			rn := r.Name
			if rn == "" {
				rn = strconv.Itoa(i)
			}
			p.rules = append(p.rules, rule{name: rn, cond: c, cluster: r.Cluster})
			clusters[r.Cluster] = true
		}
		if name == defaultProduct {
			rt.def = p
		}
	}
	if defaultProduct != "" && rt.def == nil {
		bad("default_product", "product %q does not exist", defaultProduct)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("compile routes: %w", errors.Join(errs...))
	}
	for c := range clusters {
		rt.clusters = append(rt.clusters, c)
	}
	sort.Strings(rt.clusters)
	return rt, nil
}

// NormalizeHost returns the host-table key of a configured host: lower-case,
// without a trailing dot. A host must be non-empty and must not contain a
// port, a path, spaces or control characters.
func NormalizeHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("host is empty")
	}
	if strings.ContainsAny(h, "/?#@ \t\r\n") || strings.ContainsFunc(h, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("host %q must be a bare host name, without scheme, path or spaces", truncate(h))
	}
	if stripPort(h) != h && !strings.HasPrefix(h, "[") {
		return "", fmt.Errorf("host %q must not include a port", truncate(h))
	}
	if strings.HasPrefix(h, "[") {
		return "", fmt.Errorf("host %q: write an IPv6 address without brackets", truncate(h))
	}
	k := strings.TrimSuffix(lowerASCII(h), ".")
	if k == "" {
		return "", fmt.Errorf("host %q is empty without its trailing dot", h)
	}
	return k, nil
}

// Match routes r: the product of r's host (or the default product), then
// the first rule whose condition matches. ok is false when no product
// serves the host (the caller answers 404).
func (rt *Router) Match(r *Request) (res Result, ok bool) {
	p := rt.productOf(r)
	if p == nil {
		return Result{}, false
	}
	for i := range p.rules {
		ru := &p.rules[i]
		if ru.cond.Match(r) {
			return Result{Product: p.name, RuleName: ru.name, RuleIndex: i, Cluster: ru.cluster}, true
		}
	}
	return Result{}, false
}

func (rt *Router) productOf(r *Request) *product {
	h := r.host()
	var p *product
	switch {
	case rt.hostLens&hostLenBit(h) == 0:
		// No host of that length: a miss without hashing h (a request by
		// address, say, served by the default product).
	case hasUpper(h):
		p = rt.hosts[string(r.lowerHostBytes(h))] // no allocation: map index by converted bytes
	default:
		p = rt.hosts[h]
	}
	if p == nil {
		p = rt.def
	}
	return p
}

// hostLenBit is the bit of Router.hostLens for a host of h's length: hosts
// of 63 bytes or more share the last one.
func hostLenBit(h string) uint64 {
	return 1 << min(len(h), 63)
}

// Clusters returns every cluster some rule routes to, sorted.
func (rt *Router) Clusters() []string { return append([]string(nil), rt.clusters...) }

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return true
		}
	}
	return false
}
