package main

import (
	"strconv"

	"github.com/sluicelb/sluice/api/config"
)

// fileConfig is the --config file: keys are the flag names. Durations are
// strings with a unit ("2s"). Decoded strictly by api/codec.
type fileConfig struct {
	Etcd              []string          `json:"etcd,omitempty"`
	EtcdEndpoints     []string          `json:"etcd-endpoints,omitempty"`
	EtcdCACert        *string           `json:"etcd-cacert,omitempty"`
	EtcdCert          *string           `json:"etcd-cert,omitempty"`
	EtcdKey           *string           `json:"etcd-key,omitempty"`
	EtcdUser          *string           `json:"etcd-user,omitempty"`
	EtcdPassword      *string           `json:"etcd-password,omitempty"`
	Prefix            *string           `json:"prefix,omitempty"`
	Cluster           *string           `json:"cluster,omitempty"`
	SubCluster        *string           `json:"subcluster,omitempty"`
	IDC               *string           `json:"idc,omitempty"`
	Addr              *string           `json:"addr,omitempty"`
	Weight            *int              `json:"weight,omitempty"`
	CapacityRPS       *int              `json:"capacity-rps,omitempty"`
	CapacityPerWeight *int              `json:"capacity-per-weight,omitempty"`
	Labels            map[string]string `json:"label,omitempty"`
	ProbeScheme       *string           `json:"probe-scheme,omitempty"`
	ProbePath         *string           `json:"probe-path,omitempty"`
	ProbeHost         *string           `json:"probe-host,omitempty"`
	ProbeStatus       *string           `json:"probe-status,omitempty"`
	ProbeBody         *string           `json:"probe-body,omitempty"`
	ProbeCACert       *string           `json:"probe-cacert,omitempty"`
	ProbeCert         *string           `json:"probe-cert,omitempty"`
	ProbeKey          *string           `json:"probe-key,omitempty"`
	ProbeInsecure     *bool             `json:"probe-insecure,omitempty"`
	ProbeInterval     *config.Duration  `json:"probe-interval,omitempty"`
	ProbeTimeout      *config.Duration  `json:"probe-timeout,omitempty"`
	Rise              *int              `json:"rise,omitempty"`
	Fall              *int              `json:"fall,omitempty"`
	MetricsURL        *string           `json:"metrics-url,omitempty"`
	MetricsInFlight   *string           `json:"metrics-in-flight,omitempty"`
	MetricsRequests   *string           `json:"metrics-requests,omitempty"`
	ReportInterval    *config.Duration  `json:"report-interval,omitempty"`
	MinWriteGap       *config.Duration  `json:"min-write-gap,omitempty"`
	LeaseTTL          *config.Duration  `json:"lease-ttl,omitempty"`
	DrainTimeout      *config.Duration  `json:"drain-timeout,omitempty"`
	DrainMin          *config.Duration  `json:"drain-min,omitempty"`
	Admin             *string           `json:"admin,omitempty"`
	AdminToken        *string           `json:"admin-token,omitempty"`
	LogLevel          *string           `json:"log-level,omitempty"`
}

// values returns the file's settings as flag values, by flag name.
func (f fileConfig) values() map[string][]string {
	out := map[string][]string{}
	str := func(name string, v *string) {
		if v != nil {
			out[name] = []string{*v}
		}
	}
	num := func(name string, v *int) {
		if v != nil {
			out[name] = []string{strconv.Itoa(*v)}
		}
	}
	dur := func(name string, v *config.Duration) {
		if v != nil {
			out[name] = []string{v.String()}
		}
	}
	if len(f.Etcd) > 0 {
		out["etcd"] = f.Etcd
	}
	if len(f.EtcdEndpoints) > 0 {
		out["etcd-endpoints"] = f.EtcdEndpoints
	}
	for k, v := range f.Labels {
		out["label"] = append(out["label"], k+"="+v)
	}
	if f.ProbeInsecure != nil {
		out["probe-insecure"] = []string{strconv.FormatBool(*f.ProbeInsecure)}
	}
	str("etcd-cacert", f.EtcdCACert)
	str("etcd-cert", f.EtcdCert)
	str("etcd-key", f.EtcdKey)
	str("etcd-user", f.EtcdUser)
	str("etcd-password", f.EtcdPassword)
	str("prefix", f.Prefix)
	str("cluster", f.Cluster)
	str("subcluster", f.SubCluster)
	str("idc", f.IDC)
	str("addr", f.Addr)
	num("weight", f.Weight)
	num("capacity-rps", f.CapacityRPS)
	num("capacity-per-weight", f.CapacityPerWeight)
	str("probe-scheme", f.ProbeScheme)
	str("probe-path", f.ProbePath)
	str("probe-host", f.ProbeHost)
	str("probe-status", f.ProbeStatus)
	str("probe-body", f.ProbeBody)
	str("probe-cacert", f.ProbeCACert)
	str("probe-cert", f.ProbeCert)
	str("probe-key", f.ProbeKey)
	dur("probe-interval", f.ProbeInterval)
	dur("probe-timeout", f.ProbeTimeout)
	num("rise", f.Rise)
	num("fall", f.Fall)
	str("metrics-url", f.MetricsURL)
	str("metrics-in-flight", f.MetricsInFlight)
	str("metrics-requests", f.MetricsRequests)
	dur("report-interval", f.ReportInterval)
	dur("min-write-gap", f.MinWriteGap)
	dur("lease-ttl", f.LeaseTTL)
	dur("drain-timeout", f.DrainTimeout)
	dur("drain-min", f.DrainMin)
	str("admin", f.Admin)
	str("admin-token", f.AdminToken)
	str("log-level", f.LogLevel)
	return out
}
