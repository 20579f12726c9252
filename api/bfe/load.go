package bfe

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strings"

	"github.com/sluicelb/sluice/api/config"
)

// MaxFileSize bounds one BFE file (bytes).
const MaxFileSize = 64 << 20

func readFile(path string, v any) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("bfe: %w", err)
	}
	if fi.Size() > MaxFileSize {
		return nil, &FileError{File: path, Msg: fmt.Sprintf("%d bytes is larger than the %d-byte limit", fi.Size(), MaxFileSize)}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bfe: %w", err)
	}
	return decodeFile(path, raw, v)
}

func missing(path, field string) error {
	return &FileError{File: path, Path: field, Msg: "missing (BFE rejects the file too)"}
}

// ClusterConf is cluster_conf.data: each cluster's policy, BFE's defaults
// applied and mapped to Sluice's fields.
type ClusterConf struct {
	Version  string
	Policies map[string]config.Policy
	Warnings []string
}

// LoadClusterConf reads a BFE cluster_conf.data file.
func LoadClusterConf(path string) (ClusterConf, error) {
	var f clusterConfFile
	warns, err := readFile(path, &f)
	if err != nil {
		return ClusterConf{}, err
	}
	if f.Version == nil {
		return ClusterConf{}, missing(path, "Version")
	}
	if f.Config == nil {
		return ClusterConf{}, missing(path, "Config")
	}
	out := ClusterConf{Version: *f.Version, Policies: map[string]config.Policy{}, Warnings: warns}
	for _, name := range sortedKeys(*f.Config) {
		p, w, err := policyFromBFE(path, "Config."+name, (*f.Config)[name])
		if err != nil {
			return ClusterConf{}, err
		}
		out.Policies[name] = p
		out.Warnings = append(out.Warnings, w...)
	}
	return out, nil
}

// ClusterTable is cluster_table.data: cluster → sub-cluster → instances, in
// file order. An instance's BFE Name is kept as the label "name".
type ClusterTable struct {
	Version  string
	Clusters map[string]map[string][]config.Instance
	Warnings []string
}

// LoadClusterTable reads a BFE cluster_table.data file.
func LoadClusterTable(path string) (ClusterTable, error) {
	var f clusterTableFile
	warns, err := readFile(path, &f)
	if err != nil {
		return ClusterTable{}, err
	}
	if f.Version == nil {
		return ClusterTable{}, missing(path, "Version")
	}
	if f.Config == nil {
		return ClusterTable{}, missing(path, "Config")
	}
	out := ClusterTable{Version: *f.Version, Clusters: map[string]map[string][]config.Instance{}, Warnings: warns}
	for _, cl := range sortedKeys(*f.Config) {
		subs, err := convertBackends(path, "Config."+cl, (*f.Config)[cl])
		if err != nil {
			return ClusterTable{}, err
		}
		out.Clusters[cl] = subs
	}
	return out, nil
}

// LoadClusterBackends reads one cluster's sub-cluster → backends map, the
// shape BFE's bal_gslb tests load (a cluster_table.data "Config" entry).
func LoadClusterBackends(path string) (map[string][]config.Instance, error) {
	var f subClusterBackends
	if _, err := readFile(path, &f); err != nil {
		return nil, err
	}
	return convertBackends(path, "", f)
}

func convertBackends(file, path string, subs subClusterBackends) (map[string][]config.Instance, error) {
	out := map[string][]config.Instance{}
	for _, sub := range sortedKeys(subs) {
		if sub == config.Blackhole {
			return nil, &FileError{File: file, Path: join(path, sub), Msg: "GSLB_BLACKHOLE is reserved for the dropped share and cannot have backends"}
		}
		var list []config.Instance
		avail := false
		for i, b := range subs[sub] {
			p := fmt.Sprintf("%s[%d]", join(path, sub), i)
			if b == nil {
				return nil, &FileError{File: file, Path: p, Msg: "null backend (BFE rejects it too)"}
			}
			for _, m := range []struct {
				field string
				nil_  bool
			}{{"Name", b.Name == nil}, {"Addr", b.Addr == nil}, {"Port", b.Port == nil}, {"Weight", b.Weight == nil}} {
				if m.nil_ {
					return nil, missing(file, p+"."+m.field)
				}
			}
			if net.ParseIP(*b.Addr) == nil {
				return nil, &FileError{File: file, Path: p + ".Addr", Msg: fmt.Sprintf("%q is not an IP address; Sluice needs literal IPs", *b.Addr)}
			}
			if *b.Port < 1 || *b.Port > 65535 {
				return nil, &FileError{File: file, Path: p + ".Port", Msg: fmt.Sprintf("%d is outside 1..65535", *b.Port)}
			}
			if *b.Weight < 0 {
				return nil, &FileError{File: file, Path: p + ".Weight", Msg: fmt.Sprintf("%d is negative: BFE treats it as a backend that is never picked; Sluice rejects it (use 0)", *b.Weight)}
			}
			if *b.Weight > config.MaxInstanceWeight {
				return nil, &FileError{File: file, Path: p + ".Weight", Msg: fmt.Sprintf("%d is above Sluice's limit %d", *b.Weight, config.MaxInstanceWeight)}
			}
			if *b.Weight > 0 {
				avail = true
			}
			inst := config.Instance{Addr: *b.Addr, Port: *b.Port, Weight: *b.Weight}
			if *b.Name != "" {
				inst.Labels = map[string]string{"name": *b.Name}
			}
			list = append(list, inst)
		}
		if !avail {
			return nil, &FileError{File: file, Path: join(path, sub), Msg: "no backend with a weight above 0 (BFE rejects it too)"}
		}
		out[sub] = list
	}
	return out, nil
}

// GSLB is gslb.data: one proxy cluster's weight rows, cluster → sub-cluster
// (and GSLB_BLACKHOLE) → weight, as written (negative weights included).
type GSLB struct {
	Hostname string
	Ts       string
	Rows     map[string]map[string]int
	Warnings []string
}

// LoadGSLB reads a BFE gslb.data file.
func LoadGSLB(path string) (GSLB, error) {
	var f gslbFile
	warns, err := readFile(path, &f)
	if err != nil {
		return GSLB{}, err
	}
	switch {
	case f.Clusters == nil:
		return GSLB{}, missing(path, "Clusters")
	case f.Hostname == nil:
		return GSLB{}, missing(path, "Hostname")
	case f.Ts == nil:
		return GSLB{}, missing(path, "Ts")
	}
	out := GSLB{Hostname: *f.Hostname, Ts: *f.Ts, Rows: *f.Clusters, Warnings: warns}
	for _, cl := range sortedKeys(out.Rows) {
		if err := checkGSLBRow(path, "Clusters."+cl, out.Rows[cl]); err != nil {
			return GSLB{}, err
		}
	}
	return out, nil
}

// LoadGSLBRow reads one cluster's row (sub-cluster → weight), the shape BFE's
// bal_gslb tests load.
func LoadGSLBRow(path string) (map[string]int, error) {
	var row map[string]int
	if _, err := readFile(path, &row); err != nil {
		return nil, err
	}
	if row == nil {
		return nil, &FileError{File: path, Msg: "null row"}
	}
	if err := checkGSLBRow(path, "", row); err != nil {
		return nil, err
	}
	return row, nil
}

func checkGSLBRow(file, path string, row map[string]int) error {
	total := 0
	for _, w := range row {
		if w > 0 {
			total += w
		}
	}
	if total <= 0 {
		return &FileError{File: file, Path: path, Msg: "no weight above 0 (BFE rejects it too)"}
	}
	return nil
}

// LoadGslbBasic reads a GslbBasic object alone (BFE's bal_gslb test shape)
// and returns the policy it implies over BFE's defaults.
func LoadGslbBasic(path string) (config.Policy, error) {
	var g gslbBasic
	if _, err := readFile(path, &g); err != nil {
		return config.Policy{}, err
	}
	p, _, err := policyFromBFE(path, "", clusterConfEntry{GslbBasic: &g})
	return p, err
}

// HostRule is host_rule.data: each product's hosts (its tags' hosts in
// order) and the default product.
type HostRule struct {
	Version        string
	DefaultProduct string
	Products       map[string][]string
	Warnings       []string
}

// LoadHostRule reads a BFE host_rule.data file.
func LoadHostRule(path string) (HostRule, error) {
	var f hostRuleFile
	warns, err := readFile(path, &f)
	if err != nil {
		return HostRule{}, err
	}
	switch {
	case f.Version == nil:
		return HostRule{}, missing(path, "Version")
	case f.Hosts == nil:
		return HostRule{}, missing(path, "Hosts")
	case f.HostTags == nil:
		return HostRule{}, missing(path, "HostTags")
	}
	out := HostRule{Version: *f.Version, Products: map[string][]string{}, Warnings: warns}
	tagOwner := map[string]string{}
	for _, product := range sortedKeys(*f.HostTags) {
		tags := (*f.HostTags)[product]
		if tags == nil {
			return HostRule{}, &FileError{File: path, Path: "HostTags." + product, Msg: "null tag list (BFE rejects it too)"}
		}
		for _, tag := range *tags {
			if prev, ok := tagOwner[tag]; ok && prev != product {
				return HostRule{}, &FileError{File: path, Path: "HostTags." + product, Msg: fmt.Sprintf("host tag %q is also listed under product %q: BFE picks one of them at random; Sluice rejects it", tag, prev)}
			}
			tagOwner[tag] = product
		}
	}
	hostTag := map[string]string{}
	for _, tag := range sortedKeys(*f.Hosts) {
		hosts := (*f.Hosts)[tag]
		if hosts == nil {
			return HostRule{}, &FileError{File: path, Path: "Hosts." + tag, Msg: "null host list (BFE rejects it too)"}
		}
		if _, ok := tagOwner[tag]; !ok {
			return HostRule{}, &FileError{File: path, Path: "Hosts." + tag, Msg: "host tag is not listed in HostTags (BFE rejects it too)"}
		}
		for i, h := range *hosts {
			p := fmt.Sprintf("Hosts.%s[%d]", tag, i)
			if h == "" {
				return HostRule{}, &FileError{File: path, Path: p, Msg: "empty host name"}
			}
			if strings.Contains(h, "*") {
				return HostRule{}, &FileError{File: path, Path: p, Msg: fmt.Sprintf("%q: wildcard host names are not supported by Sluice's host table; list the hosts", h)}
			}
			key := strings.ToLower(h)
			if prev, ok := hostTag[key]; ok {
				return HostRule{}, &FileError{File: path, Path: p, Msg: fmt.Sprintf("host %q is already listed under tag %q (BFE rejects it too)", h, prev)}
			}
			hostTag[key] = tag
		}
	}
	for _, product := range sortedKeys(*f.HostTags) {
		var hosts []string
		for _, tag := range *(*f.HostTags)[product] {
			if hs := (*f.Hosts)[tag]; hs != nil {
				hosts = append(hosts, *hs...)
			}
		}
		out.Products[product] = hosts
	}
	if f.DefaultProduct != nil {
		if _, ok := out.Products[*f.DefaultProduct]; !ok {
			return HostRule{}, &FileError{File: path, Path: "DefaultProduct", Msg: fmt.Sprintf("%q is not a product in HostTags (BFE rejects it too)", *f.DefaultProduct)}
		}
		out.DefaultProduct = *f.DefaultProduct
	}
	return out, nil
}

// NameConf is name_conf.data (BFE's service-name table for modules such as
// mod_redirect's redis). Sluice does not use it; it is parsed only so that
// its syntax can be checked.
type NameConf struct {
	Version string
	Names   map[string]int // name → number of instances
}

// LoadNameConf reads a BFE name_conf.data file.
func LoadNameConf(path string) (NameConf, error) {
	var f nameConfFile
	if _, err := readFile(path, &f); err != nil {
		return NameConf{}, err
	}
	if f.Version == nil {
		return NameConf{}, missing(path, "Version")
	}
	if f.Config == nil {
		return NameConf{}, missing(path, "Config")
	}
	out := NameConf{Version: *f.Version, Names: map[string]int{}}
	for name, list := range *f.Config {
		out.Names[name] = len(list)
	}
	return out, nil
}

// SessionSticky is BFE's mod_session_sticky product rule file. Sluice does
// not import it (instance stickiness is a cluster policy, balance.instance
// "sticky-cookie"); it is parsed and checked as BFE checks it.
type SessionSticky struct {
	Version string
	Rules   map[string]int // product → number of rules
}

// LoadSessionSticky reads a BFE mod_session_sticky data file.
func LoadSessionSticky(path string) (SessionSticky, error) {
	var f sessionStickyFile
	if _, err := readFile(path, &f); err != nil {
		return SessionSticky{}, err
	}
	if f.Version == nil {
		return SessionSticky{}, missing(path, "Version")
	}
	if f.Config == nil {
		return SessionSticky{}, missing(path, "Config")
	}
	out := SessionSticky{Version: *f.Version, Rules: map[string]int{}}
	for _, product := range sortedKeys(*f.Config) {
		rules := (*f.Config)[product]
		if rules == nil {
			return SessionSticky{}, &FileError{File: path, Path: "Config." + product, Msg: "null rule list (BFE rejects it too)"}
		}
		for i, r := range *rules {
			p := fmt.Sprintf("Config.%s[%d]", product, i)
			bad := func(field, msg string) error {
				return &FileError{File: path, Path: p + "." + field, Msg: msg + " (BFE rejects it too)"}
			}
			switch {
			case r.Cond == nil:
				return SessionSticky{}, missing(path, p+".Cond")
			case r.MaskCode != nil && len(*r.MaskCode) < 4:
				return SessionSticky{}, bad("MaskCode", fmt.Sprintf("%q is shorter than 4 characters", *r.MaskCode))
			case r.StandbyMaskCode != nil && len(*r.StandbyMaskCode) < 4:
				return SessionSticky{}, bad("StandbyMaskCode", fmt.Sprintf("%q is shorter than 4 characters", *r.StandbyMaskCode))
			case r.CookieKey != nil && strings.TrimSpace(*r.CookieKey) == "":
				return SessionSticky{}, bad("CookieKey", "is empty")
			case r.MaxAge != nil && *r.MaxAge < 0:
				return SessionSticky{}, bad("MaxAge", fmt.Sprintf("%d is negative", *r.MaxAge))
			case r.Path != nil && !strings.HasPrefix(*r.Path, "/"):
				return SessionSticky{}, bad("Path", fmt.Sprintf("%q does not start with /", *r.Path))
			case r.Type != nil && *r.Type != "Cookie" && *r.Type != "Sticky":
				return SessionSticky{}, bad("Type", fmt.Sprintf("%q is not Cookie or Sticky", *r.Type))
			case r.Type != nil && *r.Type == "Sticky" && r.CookieKey == nil:
				return SessionSticky{}, bad("CookieKey", "is required for a Sticky rule")
			}
		}
		out.Rules[product] = len(*rules)
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
