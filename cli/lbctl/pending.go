package lbctl

import "fmt"

// planScenario is wired to scheduler/scenario once it lands.
func planScenario(e *env, path string) error {
	return fmt.Errorf("plan --scenario %s: offline scenarios are not available in this build", path)
}
