package lbctl

import (
	"fmt"

	"github.com/sluicelb/sluice/scheduler/scenario"
)

// planScenario computes a scenario offline with the scheduler's own planner
// (no etcd, no scheduler process) and prints the matrix, flows, objective,
// utilisation and explanations.
func planScenario(e *env, path string) error {
	raw, err := readInput(path, e.c.App.Reader)
	if err != nil {
		return err
	}
	r, err := scenario.Run(raw)
	if err != nil {
		return fmt.Errorf("scenario %s: %w", path, err)
	}
	format := e.format
	if format == "yaml" {
		format = "json"
	}
	return r.Render(e.out, format)
}
