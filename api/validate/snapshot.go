package validate

import (
	"github.com/sluicelb/sluice/api/snapshot"
)

// Snapshot checks a snapshot before it is published or applied. It returns
// nil or Errors.
func Snapshot(s *snapshot.Snapshot) error {
	var c collector
	_ = s
	return c.err()
}
