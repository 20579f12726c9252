package lbctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/sluicelb/sluice/api/bfe"
)

func bfeCommand() *cli.Command {
	return &cli.Command{
		Name:  "bfe",
		Usage: "import or export BFE configuration (server_data_conf/, cluster_conf/)",
		Subcommands: []*cli.Command{
			{
				Name:      "import",
				Usage:     "convert a BFE conf directory into a Sluice desired state (printed, or written with --out)",
				UsageText: "lbctl bfe import --conf-dir DIR [--proxy-cluster BFE] [--idc IDC1] [--subcluster-idc SC=IDC ...] [--out FILE] [-o yaml|json]",
				Description: "Reads host_rule.data, route_rule.data, cluster_conf.data, gslb.data and cluster_table.data.\n" +
					"gslb.data's rows become pins of --proxy-cluster. Warnings (conversions, dropped fields) go to stderr.\n" +
					"Apply the result with lbctl apply -f FILE. See docs/bfe-migration.md.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "conf-dir", Required: true, Usage: "BFE conf directory"},
					&cli.StringFlag{Name: "proxy-cluster", Value: bfe.DefaultProxyCluster, Usage: "proxy cluster that receives gslb.data's rows"},
					&cli.StringFlag{Name: "idc", Value: bfe.DefaultIDC, Usage: "IDC of the proxy cluster and of every sub-cluster"},
					&cli.StringSliceFlag{Name: "subcluster-idc", Usage: "SUBCLUSTER=IDC for sub-clusters in another IDC (repeatable)"},
					&cli.StringFlag{Name: "out", Usage: "write the state to this file instead of stdout"},
				},
				Action: action(func(e *env) error {
					opts := bfe.ImportOptions{ProxyCluster: e.c.String("proxy-cluster"), IDC: e.c.String("idc"), SubClusterIDC: map[string]string{}}
					for _, kv := range e.c.StringSlice("subcluster-idc") {
						k, v, ok := strings.Cut(kv, "=")
						if !ok || k == "" || v == "" {
							return usageErr("--subcluster-idc %q: want SUBCLUSTER=IDC", kv)
						}
						opts.SubClusterIDC[k] = v
					}
					s, warns, err := bfe.ImportDir(e.c.String("conf-dir"), opts)
					if err != nil {
						return fmt.Errorf("bfe import of %s: %w", e.c.String("conf-dir"), err)
					}
					for _, w := range warns {
						e.progressf("warning: %s", w)
					}
					out := e.c.String("out")
					if out == "" {
						if e.format == "json" {
							return e.render(s, nil)
						}
						b, err := yaml.Marshal(s)
						if err != nil {
							return err
						}
						_, err = e.out.Write(b)
						return err
					}
					b, err := yaml.Marshal(s)
					if err != nil {
						return err
					}
					if err := writeFileAtomic(out, b); err != nil {
						return err
					}
					res := bfeImportResult{Action: "imported", ConfDir: e.c.String("conf-dir"), File: out, Clusters: len(s.Clusters), Products: len(s.Products), Warnings: warns}
					return e.wrote(res, fmt.Sprintf("Imported %d clusters and %d products from %s into %s (%d warnings). Next: lbctl apply -f %s\n",
						res.Clusters, res.Products, res.ConfDir, out, len(warns), out))
				}),
			},
			{
				Name:      "export",
				Usage:     "write the stored desired state as BFE files for one proxy cluster",
				UsageText: "lbctl bfe export --proxy-cluster B --out DIR [--live]",
				Description: "cluster_table.data lists the instances of the desired state; --live adds the agents' current\n" +
					"registrations (as the scheduler merges them). Each cluster or sub-cluster left out of\n" +
					"cluster_table.data (no instance) is named in a warning on stderr.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "proxy-cluster", Required: true, Usage: "whose rows go into gslb.data"},
					&cli.StringFlag{Name: "out", Required: true, Usage: "directory to write server_data_conf/ and cluster_conf/ into"},
					&cli.BoolFlag{Name: "live", Usage: "also write the instances agents have registered (etcd instances/)"},
				},
				Action: action(func(e *env) error {
					ctx, cancel := e.ctx()
					defer cancel()
					st, err := e.storedState(ctx)
					if err != nil {
						return err
					}
					state := &st.State
					var warns []string
					if e.c.Bool("live") {
						regs, err := e.instances(ctx, "")
						if err != nil {
							return err
						}
						state, warns = bfe.WithRegistrations(state, regs)
					}
					ew, err := bfe.ExportDir(state, e.c.String("proxy-cluster"), e.c.String("out"))
					if err != nil {
						return err
					}
					if len(ew) > 0 && !e.c.Bool("live") {
						ew = append(ew, "clusters whose instances agents register: run with --live to export the registrations")
					}
					warns = append(warns, ew...)
					for _, w := range warns {
						e.progressf("warning: %s", w)
					}
					res := bfeExportResult{Action: "exported", Revision: st.Revision, ProxyCluster: e.c.String("proxy-cluster"), Dir: e.c.String("out"), Live: e.c.Bool("live"), Warnings: warns}
					return e.wrote(res, fmt.Sprintf("Exported revision %d for %s into %s (%d warnings)\n", res.Revision, res.ProxyCluster, res.Dir, len(warns)))
				}),
			},
		},
	}
}

type bfeImportResult struct {
	Action   string   `json:"action"`
	ConfDir  string   `json:"conf_dir"`
	File     string   `json:"file"`
	Clusters int      `json:"clusters"`
	Products int      `json:"products"`
	Warnings []string `json:"warnings,omitempty"`
}

type bfeExportResult struct {
	Action       string   `json:"action"`
	Revision     int64    `json:"revision"`
	ProxyCluster string   `json:"proxy_cluster"`
	Dir          string   `json:"dir"`
	Live         bool     `json:"live"`
	Warnings     []string `json:"warnings,omitempty"`
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
