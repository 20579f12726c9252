package lbproxy

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluicelb/sluice/api/snapshot"
)

func startFileSource(cfg Config, log *slog.Logger, apply func(*snapshot.Snapshot) error,
	goBG func(string, func(context.Context) error)) (string, error) {
	return "", errors.New("file source not wired yet")
}
