// Package bfe reads and writes BFE's configuration files so that a BFE user
// can move to Sluice: ImportDir turns a BFE conf directory (server_data_conf/
// and cluster_conf/) into a Sluice desired state, ExportDir writes a state
// back in BFE's formats, Snapshot compiles a directory into what
// `lbproxy --bfe-conf DIR` serves, and ReadServerConf reads bfe.conf's ports.
//
// BFE's semantics and defaults are followed where Sluice can express them;
// where Sluice is stricter (duplicate JSON keys, negative instance weights) or
// differs (rows that do not sum to 100, product rules without a default
// rule, backend protocols), the error or warning says so. docs/bfe-migration.md
// has the full mapping. Everything here is pure: no network, and the only
// file writes are ExportDir's (temp file + rename).
package bfe

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// Paths of the files inside a BFE conf directory.
const (
	HostRuleFile     = "server_data_conf/host_rule.data"
	RouteRuleFile    = "server_data_conf/route_rule.data"
	ClusterConfFile  = "server_data_conf/cluster_conf.data"
	NameConfFile     = "server_data_conf/name_conf.data"
	GSLBFile         = "cluster_conf/gslb.data"
	ClusterTableFile = "cluster_conf/cluster_table.data"
)

// Defaults of ImportOptions.
const (
	DefaultProxyCluster = "BFE"
	DefaultIDC          = "IDC1"
	// PinAuthor marks pins made from gslb.data.
	PinAuthor = "bfe-import"
	PinReason = "imported from BFE gslb.data"
)

// ImportOptions say where the imported configuration lives in Sluice's
// topology, which BFE does not describe.
type ImportOptions struct {
	// ProxyCluster receives gslb.data's rows as pins. Default "BFE".
	ProxyCluster string
	// IDC is the proxy cluster's IDC and every sub-cluster's unless
	// SubClusterIDC names another. Default "IDC1".
	IDC string
	// SubClusterIDC maps a sub-cluster name to its IDC.
	SubClusterIDC map[string]string
}

func (o ImportOptions) withDefaults() ImportOptions {
	if o.ProxyCluster == "" {
		o.ProxyCluster = DefaultProxyCluster
	}
	if o.IDC == "" {
		o.IDC = DefaultIDC
	}
	return o
}

// ErrInvalidState is returned (wrapped, with validate.Errors) when the
// imported state fails Sluice's validator.
var ErrInvalidState = errors.New("imported state is invalid")

// ImportDir reads the BFE conf directory dir (it holds server_data_conf/ and
// cluster_conf/) into a desired state, returning warnings about everything
// that was converted or dropped. Nothing is returned on error. The state
// passes validate.State.
func ImportDir(dir string, opts ImportOptions) (*config.State, []string, error) {
	opts = opts.withDefaults()
	file := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	hosts, err := LoadHostRule(file(HostRuleFile))
	if err != nil {
		return nil, nil, err
	}
	routes, err := LoadRouteRule(file(RouteRuleFile))
	if err != nil {
		return nil, nil, err
	}
	ccf, err := LoadClusterConf(file(ClusterConfFile))
	if err != nil {
		return nil, nil, err
	}
	table, err := LoadClusterTable(file(ClusterTableFile))
	if err != nil {
		return nil, nil, err
	}
	gslb, err := LoadGSLB(file(GSLBFile))
	if err != nil {
		return nil, nil, err
	}
	var warns []string
	for _, w := range [][]string{hosts.Warnings, routes.Warnings, ccf.Warnings, table.Warnings, gslb.Warnings} {
		warns = append(warns, w...)
	}
	if _, err := os.Stat(file(NameConfFile)); err == nil {
		warns = append(warns, file(NameConfFile)+": ignored: Sluice does not use BFE's name table")
	}

	st := &config.State{
		Topology: config.Topology{
			ProxyClusters: map[string]config.ProxyCluster{opts.ProxyCluster: {IDC: opts.IDC}},
		},
		Products:       map[string]config.Product{},
		DefaultProduct: hosts.DefaultProduct,
		Clusters:       map[string]config.Cluster{},
		Scheduler:      config.DefaultSchedulerSettings(),
	}

	// Products: BFE requires every routed product to have hosts.
	for _, product := range sortedKeys(routes.Products) {
		if _, ok := hosts.Products[product]; !ok {
			return nil, nil, &FileError{File: file(RouteRuleFile), Path: product,
				Msg: "product has route rules but no hosts in " + HostRuleFile + " (BFE rejects it too)"}
		}
	}
	for _, product := range sortedKeys(hosts.Products) {
		rules, ok := routes.Products[product]
		if !ok || len(rules) == 0 {
			warns = append(warns, fmt.Sprintf("%s: product %q has hosts but no route rules: BFE answers its requests with an error; not imported, so Sluice answers them 404 (or routes them to the default product)",
				file(RouteRuleFile), product))
			if st.DefaultProduct == product {
				return nil, nil, &FileError{File: file(HostRuleFile), Path: "DefaultProduct",
					Msg: fmt.Sprintf("default product %q has no route rules", product)}
			}
			continue
		}
		if !isDefaultCond(rules[len(rules)-1].Cond) {
			last := rules[len(rules)-1].Cluster
			rules = append(slices.Clone(rules), config.Rule{Cond: DefaultCond, Cluster: last})
			warns = append(warns, fmt.Sprintf("%s: product %q: its rules do not end with default_t(); BFE answers unmatched requests with an error, Sluice requires a default rule: appended default_t() → %q (its last rule's cluster)",
				file(RouteRuleFile), product, last))
		}
		st.Products[product] = config.Product{Hosts: hosts.Products[product], Rules: rules}
	}

	// Clusters: policy from cluster_conf.data, members from cluster_table.data.
	for _, name := range sortedKeys(st.Products) {
		for i, r := range st.Products[name].Rules {
			if _, ok := ccf.Policies[r.Cluster]; !ok {
				return nil, nil, &FileError{File: file(RouteRuleFile), Path: fmt.Sprintf("%s rule %d", name, i),
					Msg: fmt.Sprintf("cluster %q is not in %s (BFE rejects it too)", r.Cluster, ClusterConfFile)}
			}
		}
	}
	idcs := map[string]bool{opts.IDC: true}
	for _, name := range sortedKeys(ccf.Policies) {
		c := config.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: ccf.Policies[name]}
		subs, ok := table.Clusters[name]
		if !ok {
			warns = append(warns, fmt.Sprintf("%s: cluster %q has no entry in %s: imported with no sub-clusters", file(ClusterTableFile), name, ClusterTableFile))
		}
		for sn, insts := range subs {
			c.SubClusters[sn] = config.SubCluster{IDC: subIDC(opts, sn), Instances: insts}
		}
		if row, ok := gslb.Rows[name]; ok {
			pin, w, err := pinFromRow(file(GSLBFile), opts, name, row, &c)
			if err != nil {
				return nil, nil, err
			}
			warns = append(warns, w...)
			st.Pins = append(st.Pins, pin)
		}
		for _, sc := range c.SubClusters {
			idcs[sc.IDC] = true
		}
		st.Clusters[name] = c
	}
	for _, name := range sortedKeys(table.Clusters) {
		if _, ok := ccf.Policies[name]; !ok {
			warns = append(warns, fmt.Sprintf("%s: cluster %q is not in %s: not imported", file(ClusterTableFile), name, ClusterConfFile))
		}
	}
	for _, name := range sortedKeys(gslb.Rows) {
		if _, ok := ccf.Policies[name]; !ok {
			warns = append(warns, fmt.Sprintf("%s: cluster %q is not in %s: its row is not imported", file(GSLBFile), name, ClusterConfFile))
		}
	}
	st.Topology.IDCs = slices.Sorted(maps.Keys(idcs))
	if err := validate.State(st); err != nil {
		return nil, nil, fmt.Errorf("bfe import %s: %w: %w", dir, ErrInvalidState, err)
	}
	return st, warns, nil
}

func subIDC(opts ImportOptions, sub string) string {
	if idc, ok := opts.SubClusterIDC[sub]; ok && idc != "" {
		return idc
	}
	return opts.IDC
}

// pinFromRow turns one gslb.data row into a pin of 100 points. Negative
// weights exclude the sub-cluster (BFE's silent meaning, made explicit);
// rows that do not sum to 100 are rescaled by largest remainder; sub-clusters
// in the row but not in cluster_table.data are added without instances.
func pinFromRow(file string, opts ImportOptions, cluster string, row map[string]int, c *config.Cluster) (config.Pin, []string, error) {
	var warns []string
	names := sortedKeys(row)
	weights := make([]int64, len(names))
	var total int64
	for i, sn := range names {
		w := row[sn]
		switch {
		case w < 0 && sn == config.Blackhole:
			return config.Pin{}, nil, &FileError{File: file, Path: "Clusters." + cluster + "." + sn,
				Msg: fmt.Sprintf("%d is negative: BFE treats it as 0; Sluice rejects it", w)}
		case w < 0:
			sc, ok := c.SubClusters[sn]
			if !ok {
				sc.IDC = subIDC(opts, sn)
			}
			sc.Excluded = true
			c.SubClusters[sn] = sc
			warns = append(warns, fmt.Sprintf("%s: Clusters.%s.%s: weight %d: BFE silently excludes the sub-cluster; Sluice is stricter and has no negative weights: imported as excluded: true with weight 0", file, cluster, sn, w))
		default:
			weights[i] = int64(w)
			total += int64(w)
		}
		if _, ok := c.SubClusters[sn]; !ok && sn != config.Blackhole {
			warns = append(warns, fmt.Sprintf("%s: Clusters.%s.%s: sub-cluster is not in %s: imported with no instances", file, cluster, sn, ClusterTableFile))
			c.SubClusters[sn] = config.SubCluster{IDC: subIDC(opts, sn)}
		}
	}
	shares := snapshot.LargestRemainder(weights, config.DefaultDenominator)
	if total != config.DefaultDenominator {
		warns = append(warns, fmt.Sprintf("%s: Clusters.%s: weights sum to %d; BFE divides by the sum, Sluice rows sum to 100: rescaled to %v", file, cluster, total, rowString(names, shares)))
	}
	pin := config.Pin{ProxyCluster: opts.ProxyCluster, Cluster: cluster, Weights: map[string]int{}, Reason: PinReason, Author: PinAuthor}
	for i, sn := range names {
		pin.Weights[sn] = shares[i]
	}
	// Every sub-cluster and the blackhole appear in the pin, so that an
	// export writes the same row back.
	for sn := range c.SubClusters {
		if _, ok := pin.Weights[sn]; !ok {
			pin.Weights[sn] = 0
		}
	}
	if _, ok := pin.Weights[config.Blackhole]; !ok {
		pin.Weights[config.Blackhole] = 0
	}
	if pin.Weights[config.Blackhole] == config.DefaultDenominator {
		pin.AllowFullDrop = true
		warns = append(warns, fmt.Sprintf("%s: Clusters.%s: GSLB_BLACKHOLE takes every request: imported with allow_full_drop", file, cluster))
	}
	return pin, warns, nil
}

func rowString(names []string, shares []int) string {
	m := map[string]int{}
	for i, n := range names {
		m[n] = shares[i]
	}
	return fmt.Sprint(m)
}

// Snapshot compiles the BFE conf directory dir into the snapshot
// `lbproxy --bfe-conf DIR` serves for opts.ProxyCluster: ImportDir, then
// snapshot.FromState, validated. BFE's balancing defaults are part of the
// import (subcluster_mode "bfe", the hash key from HashConf). Version is 1.
func Snapshot(dir string, opts ImportOptions) (*snapshot.Snapshot, error) {
	opts = opts.withDefaults()
	st, _, err := ImportDir(dir, opts)
	if err != nil {
		return nil, err
	}
	snap, err := snapshot.FromState(st, opts.ProxyCluster, snapshot.Meta{Version: 1, Author: PinAuthor, Reason: "bfe conf " + dir})
	if err != nil {
		return nil, fmt.Errorf("bfe snapshot: %w", err)
	}
	if err := validate.Snapshot(snap); err != nil {
		return nil, fmt.Errorf("bfe snapshot %s: %w", dir, err)
	}
	return snap, nil
}
