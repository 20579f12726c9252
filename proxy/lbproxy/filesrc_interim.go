package lbproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// startFileSource is an interim, load-once file source: --config FILE with a
// snapshot JSON document is read, validated and applied at start; no reload
// and no --bfe-conf yet. It is replaced by proxy/filesource (reload on change
// and SIGHUP, desired-state and BFE directories) as soon as that package
// lands; the signature stays.
func startFileSource(cfg Config, log *slog.Logger, apply func(*snapshot.Snapshot) error,
	goBG func(string, func(context.Context) error)) (string, error) {
	if cfg.ConfigFile == "" {
		return "", errors.New("lbproxy: --bfe-conf is not supported by this build yet (waiting for proxy/filesource)")
	}
	raw, err := os.ReadFile(cfg.ConfigFile)
	if err != nil {
		return "", fmt.Errorf("lbproxy: --config: %w", err)
	}
	s, err := snapshot.Unmarshal(raw)
	if err != nil {
		return "", fmt.Errorf("lbproxy: --config %s: %w", cfg.ConfigFile, err)
	}
	if s.Meta.ProxyCluster == "" {
		s.Meta.ProxyCluster = cfg.ProxyCluster
	}
	if s.Meta.Hash == "" {
		s.Meta.Hash = snapshot.ContentHash(s)
	}
	if err := validate.Snapshot(s); err != nil {
		return "", fmt.Errorf("lbproxy: --config %s: %w", cfg.ConfigFile, err)
	}
	if err := apply(s); err != nil {
		return "", fmt.Errorf("lbproxy: --config %s: %w", cfg.ConfigFile, err)
	}
	log.Info("config file applied (interim loader: no reload)", "file", cfg.ConfigFile, "version", s.Meta.Version)
	return cfg.ConfigFile, nil
}
