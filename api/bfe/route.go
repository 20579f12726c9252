package bfe

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/api/config"
)

// AdvancedMode is the BasicRule cluster name that sends a request on to the
// product's condition rules (ProductRule).
const AdvancedMode = "ADVANCED_MODE"

// DefaultCond is the condition of a product's final, catch-all rule.
const DefaultCond = "default_t()"

// RouteRule is route_rule.data converted to ordered Sluice rules per
// product: BFE matches BasicRule (host+path tables) first and ProductRule
// (conditions) after, so the basic rules come first, each written as an
// equivalent condition. No default rule is added here (see ImportDir).
type RouteRule struct {
	Version  string
	Products map[string][]config.Rule
	Warnings []string
}

// LoadRouteRule reads a BFE route_rule.data file.
func LoadRouteRule(path string) (RouteRule, error) {
	var f routeRuleFile
	warns, err := readFile(path, &f)
	if err != nil {
		return RouteRule{}, err
	}
	if f.Version == nil {
		return RouteRule{}, missing(path, "Version")
	}
	if f.BasicRule == nil && f.ProductRule == nil {
		return RouteRule{}, &FileError{File: path, Msg: "neither BasicRule nor ProductRule is present (BFE rejects it too)"}
	}
	out := RouteRule{Version: *f.Version, Products: map[string][]config.Rule{}, Warnings: warns}
	if f.BasicRule != nil {
		for _, product := range sortedKeys(*f.BasicRule) {
			rules, err := convertBasicRules(path, product, (*f.BasicRule)[product])
			if err != nil {
				return RouteRule{}, err
			}
			out.Products[product] = rules
		}
	}
	if f.ProductRule != nil {
		for _, product := range sortedKeys(*f.ProductRule) {
			rules := out.Products[product]
			for i, r := range (*f.ProductRule)[product] {
				p := fmt.Sprintf("ProductRule.%s[%d]", product, i)
				if r.ClusterName == nil {
					return RouteRule{}, missing(path, p+".ClusterName")
				}
				if r.Cond == nil {
					return RouteRule{}, missing(path, p+".Cond")
				}
				if strings.TrimSpace(*r.Cond) == "" {
					return RouteRule{}, &FileError{File: path, Path: p + ".Cond", Msg: "empty condition (BFE rejects it too)"}
				}
				rules = append(rules, config.Rule{Cond: *r.Cond, Cluster: *r.ClusterName})
			}
			if rules == nil {
				rules = []config.Rule{}
			}
			out.Products[product] = rules
		}
	}
	return out, nil
}

// isDefaultCond reports whether cond is default_t(), spaces ignored.
func isDefaultCond(cond string) bool {
	return strings.Join(strings.Fields(cond), "") == DefaultCond
}

// hostGroup is one host key of BFE's basic-rule tree with its paths.
type hostGroup struct {
	host  string // "www.a.com", "*.foo.com" or "*"
	paths []pathEntry
}

type pathEntry struct {
	path    string // as written: "/a" or "/a*"
	key     string // BFE's tree key: exact path, or the prefix for a wildcard
	prefix  bool
	cluster string
}

// convertBasicRules turns one product's BasicRule list into ordered rules
// that pick the same cluster as BFE's basic-rule tree: the most specific host
// wins (exact, then a one-label wildcard "*.x.com", then "*"), and only its
// paths are tried (exact, then the longest wildcard prefix). A request whose
// host key matched but whose paths did not, or whose match is ADVANCED_MODE,
// goes on to the condition rules.
func convertBasicRules(file, product string, list []basicRuleFile) ([]config.Rule, error) {
	groups := map[string]*hostGroup{}
	var order []string
	for i, r := range list {
		p := fmt.Sprintf("BasicRule.%s[%d]", product, i)
		if r.ClusterName == nil {
			return nil, missing(file, p+".ClusterName")
		}
		if len(r.Hostname) == 0 && len(r.Path) == 0 {
			return nil, &FileError{File: file, Path: p, Msg: "neither Hostname nor Path is set (BFE rejects it too)"}
		}
		hosts, paths := r.Hostname, r.Path
		for j, h := range hosts {
			if err := checkBasicHost(h); err != nil {
				return nil, &FileError{File: file, Path: fmt.Sprintf("%s.Hostname[%d]", p, j), Msg: fmt.Sprintf("%q: %v (BFE rejects it too)", h, err)}
			}
		}
		for j, pa := range paths {
			if err := checkBasicPath(pa); err != nil {
				return nil, &FileError{File: file, Path: fmt.Sprintf("%s.Path[%d]", p, j), Msg: fmt.Sprintf("%q: %v (BFE rejects it too)", pa, err)}
			}
		}
		if len(hosts) == 0 {
			hosts = []string{"*"}
		}
		if len(paths) == 0 {
			paths = []string{"*"}
		}
		for _, h := range hosts {
			key := strings.ToLower(h)
			g, ok := groups[key]
			if !ok {
				g = &hostGroup{host: key}
				groups[key] = g
				order = append(order, key)
			}
			for _, pa := range paths {
				e := pathEntry{path: pa, key: pa, cluster: *r.ClusterName}
				if strings.HasSuffix(pa, "*") {
					e.prefix = true
					e.key = strings.TrimSuffix(pa, "*")
					if e.key != "" && !strings.HasSuffix(e.key, "/") {
						e.key += "/"
					}
				}
				for _, old := range g.paths {
					if old.key == e.key && old.prefix == e.prefix {
						return nil, &FileError{File: file, Path: p, Msg: fmt.Sprintf("path %q is duplicated for host %q, already routed to %q (BFE rejects it too)", pa, h, old.cluster)}
					}
				}
				g.paths = append(g.paths, e)
			}
		}
	}
	var exact, wild []*hostGroup
	var any_ *hostGroup
	for _, k := range order {
		g := groups[k]
		switch {
		case k == "*":
			any_ = g
		case strings.HasPrefix(k, "*."):
			wild = append(wild, g)
		default:
			exact = append(exact, g)
		}
	}
	var rules []config.Rule
	emit := func(g *hostGroup, hostCond []string) {
		// Exact paths first, then wildcard prefixes longest first (BFE's
		// longest-prefix match); stable within a class.
		sort.SliceStable(g.paths, func(i, j int) bool {
			a, b := g.paths[i], g.paths[j]
			if a.prefix != b.prefix {
				return !a.prefix
			}
			return a.prefix && len(a.key) > len(b.key)
		})
		var advanced []pathEntry // earlier matches that go to the condition rules
		for _, e := range g.paths {
			if e.cluster == AdvancedMode {
				advanced = append(advanced, e)
				continue
			}
			conds := append([]string(nil), hostCond...)
			if pc := pathCond(e); pc != "" {
				conds = append(conds, pc)
			}
			for _, a := range advanced {
				if overlaps(a, e) {
					conds = append(conds, "!("+pathCond(a)+")")
				}
			}
			cond := strings.Join(conds, " && ")
			if cond == "" {
				cond = DefaultCond
			}
			rules = append(rules, config.Rule{Cond: cond, Cluster: e.cluster})
		}
	}
	var exactHosts []string
	for _, g := range exact {
		exactHosts = append(exactHosts, g.host)
		emit(g, []string{fmt.Sprintf("req_host_in(%s)", strconv.Quote(g.host))})
	}
	for _, g := range wild {
		cond := []string{fmt.Sprintf("req_host_regmatch(%s)", strconv.Quote(wildcardRegexp(g.host)))}
		var shadow []string
		for _, h := range exactHosts {
			if matchesWildcard(g.host, h) {
				shadow = append(shadow, h)
			}
		}
		if len(shadow) > 0 {
			cond = append(cond, fmt.Sprintf("!req_host_in(%s)", strconv.Quote(strings.Join(shadow, "|"))))
		}
		emit(g, cond)
	}
	if any_ != nil {
		var cond []string
		if len(exactHosts) > 0 {
			cond = append(cond, fmt.Sprintf("!req_host_in(%s)", strconv.Quote(strings.Join(exactHosts, "|"))))
		}
		for _, g := range wild {
			cond = append(cond, fmt.Sprintf("!req_host_regmatch(%s)", strconv.Quote(wildcardRegexp(g.host))))
		}
		emit(any_, cond)
	}
	if rules == nil {
		rules = []config.Rule{}
	}
	return rules, nil
}

// wildcardRegexp matches exactly one label before the suffix of "*.x.com",
// case-insensitively, with an optional port.
func wildcardRegexp(host string) string {
	suffix := strings.TrimPrefix(host, "*")
	return "(?i)^[^.:]+" + strings.ReplaceAll(regexp.QuoteMeta(suffix), `\.`, "[.]") + "(:[0-9]+)?$"
}

func matchesWildcard(wild, host string) bool {
	suffix := strings.TrimPrefix(wild, "*")
	first, ok := strings.CutSuffix(host, suffix)
	return ok && first != "" && !strings.Contains(first, ".")
}

// pathCond is the condition for one basic-rule path (case-sensitive, as
// BFE's path tree). "" means any path.
func pathCond(e pathEntry) string {
	switch {
	case !e.prefix:
		return fmt.Sprintf("req_path_in(%s, false)", strconv.Quote(e.key))
	case e.key == "":
		return ""
	case e.key == "/":
		return `req_path_prefix_in("/", false)`
	default:
		// "/a*" matches "/a", "/a/" and "/a/…" but not "/ab".
		return fmt.Sprintf("req_path_in(%s, false) || req_path_prefix_in(%s, false)",
			strconv.Quote(strings.TrimSuffix(e.key, "/")), strconv.Quote(e.key))
	}
}

// overlaps reports whether a request could match both entries.
func overlaps(a, b pathEntry) bool {
	switch {
	case !a.prefix && !b.prefix:
		return a.key == b.key
	case !a.prefix:
		return prefixMatches(b.key, a.key)
	case !b.prefix:
		return prefixMatches(a.key, b.key)
	default:
		return strings.HasPrefix(a.key, b.key) || strings.HasPrefix(b.key, a.key)
	}
}

func prefixMatches(key, path string) bool {
	if key == "" {
		return true
	}
	return strings.HasPrefix(path, key) || path == strings.TrimSuffix(key, "/")
}

func checkBasicHost(h string) error {
	switch n := strings.Count(h, "*"); {
	case h == "":
		return fmt.Errorf("empty host name")
	case n > 1:
		return fmt.Errorf("only one * is allowed in a host name")
	case n == 1 && h != "*" && !strings.HasPrefix(h, "*."):
		//lint:ignore ST1005 the message ends with the prefix "*.", not with punctuation
		return fmt.Errorf("a wildcard host must be * or start with *.")
	}
	return nil
}

func checkBasicPath(p string) error {
	switch n := strings.Count(p, "*"); {
	case p == "":
		return fmt.Errorf("empty path")
	case n > 1:
		return fmt.Errorf("only one * is allowed in a path")
	case n == 1 && !strings.HasSuffix(p, "*"):
		return fmt.Errorf("* must be the last character of a path")
	case strings.Contains(p, "|"):
		return fmt.Errorf("| cannot appear in a path (Sluice's conditions use it as a list separator)")
	}
	return nil
}
