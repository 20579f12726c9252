package lbproxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/internal/filesource"
)

// startFileSource runs the --config / --bfe-conf source in the background
// and returns once its first snapshot is applied (a failure there stops the
// start-up). The source keeps reloading on change and SIGHUP. It returns the
// watched path. There is exactly one loader: the first load is Run's own, so
// an edit racing the start-up is never missed. state receives what was
// applied and rejected (/v1/status).
func startFileSource(cfg Config, log *slog.Logger, apply func(validate.Checked) error,
	goBG func(string, func(context.Context) error), metrics prometheus.Registerer, state *filesource.State) (string, error) {
	first := make(chan struct{})
	var once sync.Once
	fc := filesource.Config{ProxyCluster: cfg.ProxyCluster, Logger: log, Metrics: metrics, State: state, Now: cfg.Now,
		Apply: apply,
		// Called once the outcome is logged and recorded in state.
		OnChange: func() {
			if state.Status().AppliedVersion != 0 {
				once.Do(func() { close(first) })
			}
		}}
	if cfg.ConfigFile != "" {
		fc.Path, fc.Kind = cfg.ConfigFile, filesource.KindSnapshot
	} else {
		fc.Path, fc.Kind = cfg.BFEConfDir, filesource.KindBFE
	}
	failed := make(chan error, 1)
	goBG("file source", func(ctx context.Context) error {
		err := filesource.Run(ctx, fc)
		if err != nil {
			failed <- err
		}
		return err
	})
	select {
	case <-first:
		return fc.Path, nil
	case err := <-failed:
		return "", fmt.Errorf("lbproxy: %w", err)
	}
}
