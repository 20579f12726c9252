package lbproxy

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/filesource"
)

// startFileSource loads the --config / --bfe-conf source once (a failure
// stops the start-up), applies it, and keeps reloading it in the background
// on change and SIGHUP. It returns the watched path.
func startFileSource(cfg Config, log *slog.Logger, apply func(*snapshot.Snapshot) error,
	goBG func(string, func(context.Context) error), metrics prometheus.Registerer) (string, error) {
	fc := filesource.Config{ProxyCluster: cfg.ProxyCluster, Logger: log, Apply: apply, Metrics: metrics}
	if cfg.ConfigFile != "" {
		fc.Path, fc.Kind = cfg.ConfigFile, filesource.KindSnapshot
	} else {
		fc.Path, fc.Kind = cfg.BFEConfDir, filesource.KindBFE
	}
	first, err := filesource.Load(fc)
	if err != nil {
		return "", fmt.Errorf("lbproxy: %w", err)
	}
	if err := apply(first); err != nil {
		return "", fmt.Errorf("lbproxy: initial config %s: %w", fc.Path, err)
	}
	goBG("file source", func(ctx context.Context) error { return filesource.Run(ctx, fc) })
	return fc.Path, nil
}
