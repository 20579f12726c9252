package lbproxy

import (
	"fmt"

	"github.com/sluicelb/sluice/api/validate"
)

// limitInstances wraps apply so that a snapshot with more backend instances
// than max is refused before it is built (max <= 0: no limit). The
// rejection names the count and the flag, and reaches the proxy's status
// like any other (a staged rollout's apply gate shows it).
func limitInstances(max int, apply func(validate.Checked) error) func(validate.Checked) error {
	if max <= 0 {
		return apply
	}
	return func(c validate.Checked) error {
		if n := instanceCount(c); n > max {
			return fmt.Errorf("snapshot v%d has %d backend instances, over this proxy's --max-instances %d", c.Snapshot().Meta.Version, n, max)
		}
		return apply(c)
	}
}

// instanceCount counts the instances of every sub-cluster of every cluster.
func instanceCount(c validate.Checked) int {
	s := c.Snapshot()
	if s == nil {
		return 0
	}
	n := 0
	for _, cl := range s.Clusters {
		for _, sc := range cl.SubClusters {
			n += len(sc.Instances)
		}
	}
	return n
}
