package lbctl

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/validate"
)

// The validator names paths inside the desired-state document
// (pins[1].weights.SC3). A command-line write never showed the user that
// document, so its errors are reworded for the objects the user named
// (row BFE1 of demo-main, drain demo-main/SC1) and the flags they pass.

var (
	pinPath   = regexp.MustCompile(`^pins\[(\d+)\](?:\.(proxy_cluster|cluster|weights)(?:\.(.+))?)?$`)
	drainPath = regexp.MustCompile(`^drains\[(\d+)\](?:\.(cluster|subcluster))?$`)
	refIndex  = regexp.MustCompile(`by (pins|drains)\[\d+\]`)
)

// inUserWords rewords the validator's errors about s for a command-line
// write. Errors it has no words for keep their path.
func inUserWords(err error, s *config.State) error {
	es, ok := validate.AsErrors(err)
	if !ok {
		return err
	}
	lines := make([]string, 0, len(es))
	for _, e := range es {
		lines = append(lines, reword(e, s))
	}
	return errors.New(strings.Join(lines, "\n"))
}

func reword(e validate.Error, s *config.State) string {
	msg := refIndex.ReplaceAllString(e.Msg, "by another entry")
	if m := pinPath.FindStringSubmatch(e.Path); m != nil {
		i, _ := strconv.Atoi(m[1])
		if i >= len(s.Pins) {
			return e.Error()
		}
		p := s.Pins[i]
		obj := fmt.Sprintf("row %s of %s", p.ProxyCluster, p.Cluster)
		switch field, key := m[2], m[3]; {
		case field == "proxy_cluster":
			return fmt.Sprintf("%s: proxy cluster %q does not exist (the proxy clusters are %s)", obj, p.ProxyCluster, list(sortedKeys(s.Topology.ProxyClusters)))
		case field == "cluster":
			return fmt.Sprintf("%s: cluster %q does not exist (the clusters are %s)", obj, p.Cluster, list(sortedKeys(s.Clusters)))
		case field == "weights" && key != "" && strings.Contains(msg, "does not exist"):
			return fmt.Sprintf("%s: %s is not a sub-cluster of %s (it has %s)", obj, key, p.Cluster, list(sortedKeys(s.Clusters[p.Cluster].SubClusters)))
		case field == "weights" && key == config.Blackhole && strings.Contains(msg, "allow_full_drop"):
			return fmt.Sprintf("%s: %s=%d drops all traffic; pass --allow-full-drop to allow it", obj, key, p.Weights[key])
		case field == "weights" && key != "":
			return fmt.Sprintf("%s: %s=%d %s", obj, key, p.Weights[key], dropValue(msg))
		default:
			return fmt.Sprintf("%s: %s", obj, msg)
		}
	}
	if m := drainPath.FindStringSubmatch(e.Path); m != nil {
		i, _ := strconv.Atoi(m[1])
		if i >= len(s.Drains) {
			return e.Error()
		}
		d := s.Drains[i]
		obj := fmt.Sprintf("drain of %s/%s", d.Cluster, d.SubCluster)
		switch m[2] {
		case "cluster":
			return fmt.Sprintf("%s: cluster %q does not exist (the clusters are %s)", obj, d.Cluster, list(sortedKeys(s.Clusters)))
		case "subcluster":
			return fmt.Sprintf("%s: %s is not a sub-cluster of %s (it has %s)", obj, d.SubCluster, d.Cluster, list(sortedKeys(s.Clusters[d.Cluster].SubClusters)))
		}
		return fmt.Sprintf("%s: %s", obj, msg)
	}
	return e.Error()
}

// dropValue removes the leading number the validator repeats ("101 is
// larger than…" → "is larger than…"), since the caller prints SC=101.
func dropValue(msg string) string {
	if n, rest, ok := strings.Cut(msg, " "); ok {
		if _, err := strconv.Atoi(n); err == nil {
			return rest
		}
	}
	return msg
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
