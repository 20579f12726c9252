package validate

import (
	"github.com/sluicelb/sluice/api/config"
)

// State checks a desired-state document. It returns nil or Errors.
func State(s *config.State) error {
	var c collector
	_ = s
	return c.err()
}
