package etcdclient

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/keys"
)

// The etcd connection flags of every binary (lbproxy, lbscheduler, lbagent,
// lbctl), declared once. Each canonical name is --etcd-<what> with the
// environment variable SLUICE_ETCD_<WHAT>; the older names stay accepted as
// aliases (docs/config.md lists both).
const (
	FlagEndpoints   = "etcd-endpoints"
	FlagCACert      = "etcd-cacert"
	FlagCert        = "etcd-cert"
	FlagKey         = "etcd-key"
	FlagUser        = "etcd-user"
	FlagPassword    = "etcd-password"
	FlagDialTimeout = "etcd-dial-timeout"
	FlagPrefix      = "prefix"
)

// Flags returns the etcd connection flags. defaultEndpoints is the
// endpoint list used when neither the flag nor its variables are set ("" for
// none). The key prefix defaults to keys.DefaultPrefix.
//
// Aliases kept working: --etcd (daemons) and --endpoints (lbctl) for
// --etcd-endpoints, lbctl's --cacert, --cert, --key, --user, --password;
// SLUICE_ETCD and SLUICE_ENDPOINTS for SLUICE_ETCD_ENDPOINTS.
func Flags(defaultEndpoints string) []cli.Flag {
	eps := &cli.StringSliceFlag{Name: FlagEndpoints, Aliases: []string{"etcd", "endpoints"},
		Usage:   "etcd endpoints (comma-separated or repeated)",
		EnvVars: []string{"SLUICE_ETCD_ENDPOINTS", "SLUICE_ETCD", "SLUICE_ENDPOINTS"}}
	if defaultEndpoints != "" {
		eps.Value = cli.NewStringSlice(strings.Split(defaultEndpoints, ",")...)
	}
	return []cli.Flag{
		eps,
		&cli.StringFlag{Name: FlagCACert, Aliases: []string{"cacert"}, Usage: "PEM CA bundle that verifies etcd's certificate", EnvVars: []string{"SLUICE_ETCD_CACERT"}},
		&cli.StringFlag{Name: FlagCert, Aliases: []string{"cert"}, Usage: "PEM client certificate for etcd mTLS", EnvVars: []string{"SLUICE_ETCD_CERT"}},
		&cli.StringFlag{Name: FlagKey, Aliases: []string{"key"}, Usage: "PEM client key for etcd mTLS", EnvVars: []string{"SLUICE_ETCD_KEY"}},
		&cli.StringFlag{Name: FlagUser, Aliases: []string{"user"}, Usage: "etcd user name (with --etcd-password)", EnvVars: []string{"SLUICE_ETCD_USER"}},
		&cli.StringFlag{Name: FlagPassword, Aliases: []string{"password"}, Usage: "etcd password", EnvVars: []string{"SLUICE_ETCD_PASSWORD"}},
		&cli.DurationFlag{Name: FlagDialTimeout, Value: DefaultDialTimeout, Usage: "bound of one etcd connection attempt", EnvVars: []string{"SLUICE_ETCD_DIAL_TIMEOUT"}},
		&cli.StringFlag{Name: FlagPrefix, Value: keys.DefaultPrefix, Usage: "etcd key prefix", EnvVars: []string{"SLUICE_PREFIX", "SLUICE_ETCD_PREFIX"}},
	}
}

// FromFlags reads the flags of Flags into a Config (Logger and TLS unset).
// Endpoints are split on commas and trimmed; empty ones are dropped.
func FromFlags(c *cli.Context) Config {
	var eps []string
	for _, e := range c.StringSlice(FlagEndpoints) {
		for _, p := range strings.Split(e, ",") {
			if p = strings.TrimSpace(p); p != "" {
				eps = append(eps, p)
			}
		}
	}
	return Config{
		Endpoints: eps,
		Username:  c.String(FlagUser), Password: c.String(FlagPassword),
		CACert: c.String(FlagCACert), Cert: c.String(FlagCert), Key: c.String(FlagKey),
		DialTimeout: c.Duration(FlagDialTimeout),
	}
}
