package bfe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// ExportVersion is the Version written into every exported file.
const ExportVersion = "sluice"

// ExportDir writes s, as proxyCluster sees it, into dir in BFE's formats:
// server_data_conf/{host_rule,route_rule,cluster_conf}.data and
// cluster_conf/{gslb,cluster_table}.data. gslb.data holds proxyCluster's
// rows: its pins, else snapshot.StaticRow's capacity-proportional rows;
// excluded sub-clusters are written as -1. Policy fields BFE cannot express
// are left out (docs/bfe-migration.md lists them). Each file is written to a
// temporary file first and all are renamed into place only when every one was
// written, so a failure leaves dir as it was. ImportDir of the result gives
// back a state equal to s when s itself came from ImportDir.
//
// cluster_table.data lists the instances s lists (WithRegistrations adds
// the agents' registrations first). The warnings name each cluster, or
// sub-cluster, left out of cluster_table.data and why (BFE rejects an empty
// sub-cluster): one per cluster with no instance at all, one per empty
// sub-cluster of a cluster that has some.
func ExportDir(s *config.State, proxyCluster string, dir string) ([]string, error) {
	if _, ok := s.Topology.ProxyClusters[proxyCluster]; !ok {
		return nil, fmt.Errorf("bfe export: %w %q", snapshot.ErrUnknownProxyCluster, proxyCluster)
	}
	var warns []string
	files := map[string]any{}

	hostFile := hostRuleOut{Version: ExportVersion, Hosts: map[string][]string{}, HostTags: map[string][]string{}}
	if s.DefaultProduct != "" {
		dp := s.DefaultProduct
		hostFile.DefaultProduct = &dp
	}
	routeFile := routeRuleOut{Version: ExportVersion, ProductRule: map[string][]advancedRuleOut{}}
	for name, p := range s.Products {
		hostFile.HostTags[name] = []string{}
		if len(p.Hosts) > 0 {
			hostFile.Hosts[name] = p.Hosts
			hostFile.HostTags[name] = []string{name}
		}
		rules := []advancedRuleOut{}
		for _, r := range p.Rules {
			rules = append(rules, advancedRuleOut{Cond: r.Cond, ClusterName: r.Cluster})
		}
		routeFile.ProductRule[name] = rules
	}
	files[HostRuleFile] = hostFile
	files[RouteRuleFile] = routeFile

	confFile := clusterConfOut{Version: ExportVersion, Config: map[string]clusterConfEntryOut{}}
	tableFile := clusterTableOut{Version: ExportVersion, Config: map[string]map[string][]backendOut{}}
	gslbOut := gslbFileOut{Clusters: map[string]map[string]int{}, Hostname: "sluice", Ts: "0"}
	for _, name := range sortedKeys(s.Clusters) {
		c := s.Clusters[name]
		entry, err := policyToBFE(c.Policy)
		if err != nil {
			return nil, fmt.Errorf("bfe export: clusters.%s.policy: %w", name, err)
		}
		confFile.Config[name] = entry
		subs := map[string][]backendOut{}
		var empty []string
		for _, sn := range sortedKeys(c.SubClusters) {
			sc := c.SubClusters[sn]
			if len(sc.Instances) == 0 {
				empty = append(empty, sn) // BFE rejects an empty sub-cluster; the gslb row still names it
				continue
			}
			avail := false
			list := []backendOut{}
			for _, in := range sc.Instances {
				n := in.Labels["name"]
				if n == "" {
					n = in.Addr + "_" + strconv.Itoa(in.Port)
				}
				list = append(list, backendOut{Name: n, Addr: in.Addr, Port: in.Port, Weight: in.Weight})
				avail = avail || in.Weight > 0
			}
			if !avail {
				return nil, fmt.Errorf("bfe export: clusters.%s.subclusters.%s: every instance has weight 0, which BFE rejects", name, sn)
			}
			subs[sn] = list
		}
		switch {
		case len(subs) == 0:
			warns = append(warns, fmt.Sprintf("cluster %s: left out of %s: none of its %d sub-clusters lists an instance (instances registered by agents are not in the desired state)",
				name, ClusterTableFile, len(c.SubClusters)))
		default:
			tableFile.Config[name] = subs
			for _, sn := range empty {
				warns = append(warns, fmt.Sprintf("cluster %s: sub-cluster %s left out of %s: it lists no instance (BFE rejects an empty sub-cluster)", name, sn, ClusterTableFile))
			}
		}
		row := snapshot.StaticRow(s, proxyCluster, name)
		out := map[string]int{}
		for sn, w := range row.Weights {
			out[sn] = w
			if sc, ok := c.SubClusters[sn]; ok && sc.Excluded {
				out[sn] = -1
			}
		}
		gslbOut.Clusters[name] = out
	}
	files[ClusterConfFile] = confFile
	files[ClusterTableFile] = tableFile
	files[GSLBFile] = gslbOut
	if err := writeAll(dir, files); err != nil {
		return nil, err
	}
	return warns, nil
}

// writeAll writes every file to a temporary sibling, then renames them all.
func writeAll(dir string, files map[string]any) error {
	type pending struct{ tmp, dst string }
	var done []pending
	cleanup := func() {
		for _, p := range done {
			os.Remove(p.tmp)
		}
	}
	for _, rel := range sortedKeys(files) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "    ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(files[rel]); err != nil {
			cleanup()
			return fmt.Errorf("bfe export: encode %s: %w", rel, err)
		}
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			cleanup()
			return fmt.Errorf("bfe export: %w", err)
		}
		f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp*")
		if err != nil {
			cleanup()
			return fmt.Errorf("bfe export: %w", err)
		}
		done = append(done, pending{tmp: f.Name(), dst: dst})
		_, werr := f.Write(buf.Bytes())
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			cleanup()
			return fmt.Errorf("bfe export: write %s: %w", rel, err)
		}
	}
	for i, p := range done {
		if err := os.Rename(p.tmp, p.dst); err != nil {
			cleanup()
			return fmt.Errorf("bfe export: rename %s (%d of %d files already in place): %w", p.dst, i, len(done), err)
		}
	}
	return nil
}

func toMS(d config.Duration) int { return int(time.Duration(d) / time.Millisecond) }

// policyToBFE is the inverse of policyFromBFE for the fields BFE has.
func policyToBFE(p config.Policy) (clusterConfEntryOut, error) {
	var e clusterConfEntryOut
	e.BackendConf = backendBasicOut{
		Protocol:                 "http",
		TimeoutConnSrv:           toMS(p.Timeouts.Connect),
		TimeoutResponseHeader:    toMS(p.Timeouts.ResponseHeader),
		MaxIdleConnsPerHost:      p.Pool.MaxIdleConnsPerHost,
		MaxConnsPerHost:          p.Pool.MaxConnsPerHost,
		SlowStartTime:            int(time.Duration(p.SlowStart.Window) / time.Second),
		OutlierDetectionHttpCode: p.Health.OutlierStatus,
	}
	probe := p.Health.Probe
	e.CheckConf = backendCheckOut{
		Schem:         probe.Scheme,
		Uri:           probe.Path,
		Host:          probe.Host,
		FailNum:       p.Health.FailNum,
		SuccNum:       p.Health.SuccNum,
		CheckTimeout:  toMS(p.Health.Timeout),
		CheckInterval: toMS(p.Health.CheckInterval),
	}
	if probe.Status != "" {
		code, rng, err := statusToBFE(probe.Status)
		if err != nil {
			return e, fmt.Errorf("health.probe.status: %w", err)
		}
		e.CheckConf.StatusCode, e.CheckConf.StatusCodeRange = code, rng
	}
	mode := "WRR"
	sticky := false
	switch p.Balance.Instance {
	case config.InstanceWLC, config.InstanceWLCRandom, config.InstanceLeastConn:
		mode = "WLC"
	case config.InstanceSticky, config.InstanceRingHash:
		sticky = true
	}
	hc := hashConfOut{HashStrategy: hashClientIP, SessionSticky: sticky}
	switch p.Balance.Hash.Key {
	case config.HashHeader:
		hc.HashStrategy, hc.HashHeader = hashClientID, p.Balance.Hash.Header
	case config.HashHeaderOrIP:
		hc.HashStrategy, hc.HashHeader = hashClientIDPreferred, p.Balance.Hash.Header
	case config.HashURI:
		hc.HashStrategy = hashRequestURI
	}
	e.GslbBasic = gslbBasicOut{CrossRetry: p.Retry.CrossRetry, RetryMax: p.Retry.RetryMax, HashConf: hc, BalanceMode: mode}
	e.ClusterBasic = clusterBasicOut{TimeoutReadClient: toMS(p.Timeouts.ReadClient), TimeoutWriteClient: toMS(p.Timeouts.WriteClient)}
	return e, nil
}

// Output shapes: every field written, in BFE's spelling.

type hostRuleOut struct {
	Version        string
	DefaultProduct *string
	Hosts          map[string][]string
	HostTags       map[string][]string
}

type advancedRuleOut struct {
	Cond        string
	ClusterName string
}

type routeRuleOut struct {
	Version     string
	ProductRule map[string][]advancedRuleOut
}

type clusterConfOut struct {
	Version string
	Config  map[string]clusterConfEntryOut
}

type clusterConfEntryOut struct {
	BackendConf  backendBasicOut
	CheckConf    backendCheckOut
	GslbBasic    gslbBasicOut
	ClusterBasic clusterBasicOut
}

type backendBasicOut struct {
	Protocol                 string
	TimeoutConnSrv           int
	TimeoutResponseHeader    int
	MaxIdleConnsPerHost      int
	MaxConnsPerHost          int
	SlowStartTime            int
	OutlierDetectionHttpCode string `json:",omitempty"`
}

type backendCheckOut struct {
	Schem           string
	Uri             string `json:",omitempty"`
	Host            string `json:",omitempty"`
	StatusCode      int
	StatusCodeRange string `json:",omitempty"`
	FailNum         int
	SuccNum         int
	CheckTimeout    int
	CheckInterval   int
}

type hashConfOut struct {
	HashStrategy  int
	HashHeader    string `json:",omitempty"`
	SessionSticky bool
}

type gslbBasicOut struct {
	CrossRetry  int
	RetryMax    int
	HashConf    hashConfOut
	BalanceMode string
}

type clusterBasicOut struct {
	TimeoutReadClient  int
	TimeoutWriteClient int
}

type backendOut struct {
	Name   string
	Addr   string
	Port   int
	Weight int
}

type clusterTableOut struct {
	Version string
	Config  map[string]map[string][]backendOut
}

type gslbFileOut struct {
	Clusters map[string]map[string]int
	Hostname string
	Ts       string
}
