package dashboard

import (
	"net"
	"sort"
	"strconv"

	"github.com/sluicelb/sluice/api/config"
)

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

func hostPort(in config.Instance) string { return net.JoinHostPort(in.Addr, strconv.Itoa(in.Port)) }
