package bfe

import "encoding/json"

// The types below mirror BFE's on-disk formats (bfe_config/*). Pointers tell
// a missing field from a zero one, so BFE's defaults can be applied exactly.

type clusterConfFile struct {
	Version *string
	Config  *map[string]clusterConfEntry
}

type clusterConfEntry struct {
	BackendConf  *backendBasic
	CheckConf    *backendCheck
	GslbBasic    *gslbBasic
	ClusterBasic *clusterBasic
	HTTPSConf    *json.RawMessage
	AIConf       *json.RawMessage
}

type backendBasic struct {
	Protocol                 *string
	TimeoutConnSrv           *int // ms
	TimeoutResponseHeader    *int // ms
	MaxIdleConnsPerHost      *int
	MaxConnsPerHost          *int
	RetryLevel               *int
	SlowStartTime            *int // s
	OutlierDetectionHttpCode *string
	FCGIConf                 *json.RawMessage
}

type backendCheck struct {
	Schem           *string
	Uri             *string
	Host            *string
	HostType        *string
	StatusCode      *int
	StatusCodeRange *string
	FailNum         *int
	SuccNum         *int
	CheckTimeout    *int // ms
	CheckInterval   *int // ms
}

type gslbBasic struct {
	CrossRetry  *int
	RetryMax    *int
	HashConf    *hashConf
	BalanceMode *string
	EPPAddr     *json.RawMessage
}

type hashConf struct {
	HashStrategy  *int
	HashHeader    *string
	SessionSticky *bool
}

type clusterBasic struct {
	TimeoutReadClient      *int // ms
	TimeoutWriteClient     *int // ms
	TimeoutReadClientAgain *int
	ReqWriteBufferSize     *int
	ReqFlushInterval       *int
	ResFlushInterval       *int
	CancelOnClientClose    *bool
	DisableHostHeader      *bool
	DisableHealthCheck     *bool
}

type backendFile struct {
	Name   *string
	Addr   *string
	Port   *int
	Weight *int
}

// subClusterBackends is one cluster of cluster_table.data: sub-cluster → backends.
type subClusterBackends map[string][]*backendFile

type clusterTableFile struct {
	Version *string
	Config  *map[string]subClusterBackends
}

type gslbFile struct {
	Clusters *map[string]map[string]int
	Hostname *string
	Ts       *string
}

type hostRuleFile struct {
	Version        *string
	DefaultProduct *string
	Hosts          *map[string]*[]string
	HostTags       *map[string]*[]string
}

type basicRuleFile struct {
	Hostname    []string
	Path        []string
	ClusterName *string
}

type advancedRuleFile struct {
	Cond        *string
	ClusterName *string
}

type routeRuleFile struct {
	Version     *string
	BasicRule   *map[string][]basicRuleFile
	ProductRule *map[string][]advancedRuleFile
}

type nameConfFile struct {
	Version *string
	Config  *map[string][]struct {
		Host   *string
		Port   *int
		Weight *int
	}
}

type stickyRuleFile struct {
	Cond                *string
	Type                *string
	CookieKey           *string
	Domain              *string
	Path                *string
	MaxAge              *int
	MaskCode            *string
	StandbyMaskCode     *string
	Header              *string
	URIParam            *string
	Secure              *bool
	HttpOnly            *bool
	RenewWindow         *int
	StickyRequestField  *string
	StickyResponseField *string
}

type sessionStickyFile struct {
	Version *string
	Config  *map[string]*[]stickyRuleFile
}
