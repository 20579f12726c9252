package lbctl

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/proxy/explain"
)

func explainCommand() *cli.Command {
	return &cli.Command{
		Name:  "explain",
		Usage: "where would a request go, and why: route rule, cluster, sub-cluster, instance and the reasons",
		UsageText: "lbctl explain --proxy-cluster B --url URL [--method M] [--client-ip IP] [--header K:V] [--cookie K=V]\n" +
			"              (--proxy ADMIN_ADDR | --config FILE)",
		Description: "Live (--proxy host:port of a proxy's admin API) the proxy answers from the table it serves, with its\n" +
			"health and in-flight state. Offline (--config FILE: a snapshot, or a desired state compiled for\n" +
			"--proxy-cluster) lbctl builds the same table itself with every instance healthy. Nothing is forwarded.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "proxy-cluster", Usage: "proxy cluster (required with a desired-state --config)"},
			&cli.StringFlag{Name: "url", Required: true, Usage: "absolute request URL, e.g. http://demo.local/static/app.js"},
			&cli.StringFlag{Name: "method", Value: http.MethodGet, Usage: "HTTP method"},
			&cli.StringFlag{Name: "client-ip", Usage: "client (peer) address; default 127.0.0.1"},
			&cli.StringSliceFlag{Name: "header", Usage: "request header NAME:VALUE (repeatable)"},
			&cli.StringSliceFlag{Name: "cookie", Usage: "request cookie NAME=VALUE (repeatable)"},
			&cli.StringFlag{Name: "proxy", Usage: "a proxy's admin address (live)"},
			&cli.StringFlag{Name: "config", Usage: "snapshot or desired-state file (offline)"},
		},
		Action: action(func(e *env) error {
			q := url.Values{}
			q.Set("url", e.c.String("url"))
			q.Set("method", e.c.String("method"))
			if ip := e.c.String("client-ip"); ip != "" {
				q.Set("client_ip", ip)
			}
			for _, h := range e.c.StringSlice("header") {
				q.Add("header", h)
			}
			for _, c := range e.c.StringSlice("cookie") {
				q.Add("cookie", c)
			}
			var (
				ex  explain.Explanation
				err error
			)
			switch live, file := e.c.String("proxy"), e.c.String("config"); {
			case live != "" && file != "":
				return usageErr("give --proxy or --config, not both")
			case live != "":
				ex, err = explainLive(e, live, q)
			case file != "":
				ex, err = explainOffline(e, file, q)
			default:
				return usageErr("give --proxy ADMIN_ADDR (live) or --config FILE (offline)")
			}
			if err != nil {
				return err
			}
			return e.render(ex, func(w io.Writer) error { return explainTable(w, e, ex) })
		}),
	}
}

func explainLive(e *env, addr string, q url.Values) (explain.Explanation, error) {
	var ex explain.Explanation
	ctx, cancel := e.ctx()
	defer cancel()
	u := withScheme(addr) + "/v1/explain?" + q.Encode()
	code, err := e.api().do(ctx, http.MethodGet, u, nil, &ex)
	if code == http.StatusNotFound {
		return ex, fmt.Errorf("no route: the proxy has no product or rule for this request")
	}
	return ex, err
}

// explainOffline compiles the file with the pure evaluator lbproxy's admin
// API uses (package explain): routes, trusted proxies and the balancing
// table, every instance healthy; no server, no sockets.
func explainOffline(e *env, path string, q url.Values) (explain.Explanation, error) {
	raw, err := readInput(path, e.c.App.Reader)
	if err != nil {
		return explain.Explanation{}, err
	}
	s, err := loadSnapshotOrState(raw, e.c.String("proxy-cluster"))
	if err != nil {
		return explain.Explanation{}, fmt.Errorf("%s: %w", path, err)
	}
	ev, err := explain.Compile(s, nil)
	if err != nil {
		return explain.Explanation{}, fmt.Errorf("%s: %w", path, err)
	}
	req, peer, err := explain.Request(q)
	if err != nil {
		return explain.Explanation{}, usageErr("%v", err)
	}
	ex, err := ev.Explain(req, peer)
	if err != nil {
		return ex, fmt.Errorf("explain: %w", err)
	}
	return ex, nil
}

// loadSnapshotOrState decodes a snapshot, or a desired state compiled for
// proxyCluster with snapshot.FromState; either is validated and comes back
// checked.
func loadSnapshotOrState(raw []byte, proxyCluster string) (validate.Checked, error) {
	s, err := decodeSnapshotOrState(raw, proxyCluster)
	if err != nil {
		return validate.Checked{}, err
	}
	c, err := validate.Check(s)
	if err != nil {
		return validate.Checked{}, fmt.Errorf("snapshot is invalid:\n%w", err)
	}
	return c, nil
}

func decodeSnapshotOrState(raw []byte, proxyCluster string) (*snapshot.Snapshot, error) {
	j, err := codec.ToJSON(raw)
	if err != nil {
		return nil, err
	}
	if codec.KindOf(j) == codec.KindSnapshot {
		return snapshot.Unmarshal(j)
	}
	var st config.State
	if err := codec.UnmarshalJSON(j, &st); err != nil {
		return nil, err
	}
	if err := validate.State(&st); err != nil {
		return nil, fmt.Errorf("desired state is invalid:\n%w", err)
	}
	if proxyCluster == "" {
		return nil, usageErr("a desired-state --config needs --proxy-cluster")
	}
	return snapshot.FromState(&st, proxyCluster, snapshot.Meta{Version: 1, Author: "lbctl explain"})
}

func explainTable(w io.Writer, e *env, ex explain.Explanation) error {
	fmt.Fprintf(w, "Request\t%s %s (client %s)\n", e.c.String("method"), e.c.String("url"), ex.ClientIP)
	fmt.Fprintf(w, "Snapshot\tv%d\n", ex.Version)
	fmt.Fprintf(w, "Route\tproduct %s, rule %q (#%d) → cluster %s\n", ex.Product, ex.Rule, ex.RuleIdx, ex.Cluster)
	b := ex.Balance
	key := b.HashKey
	if b.KeyRandom {
		key += " (empty: random draw)"
	}
	fmt.Fprintf(w, "Sub-cluster pick\tmode %s, key %s\n", b.Mode, key)
	switch {
	case b.Blackhole:
		fmt.Fprintf(w, "Result\tBLACKHOLE: answered by the proxy (503 + Retry-After), never forwarded\n")
		return nil
	case b.Error != "":
		fmt.Fprintf(w, "Result\tno instance: %s\n", b.Error)
		return nil
	case b.Cross:
		fmt.Fprintf(w, "Sub-cluster\tnone of the weighted sub-clusters has an available instance: a cross-sub-cluster retry, drawn by the row\n")
	case b.SubCluster == "":
		fmt.Fprintf(w, "Sub-cluster\tdrawn per request (%s): %s\n", b.Reason, shares(b.Shares))
	default:
		fmt.Fprintf(w, "Sub-cluster\t%s (reason %s)\n", b.SubCluster, b.Reason)
	}
	if b.Deterministic {
		fmt.Fprintf(w, "Instance\t%s (algorithm %s, decided by %s): every such request goes there\n", b.Instance, b.Algorithm, decidedBy[b.InstanceBy])
		return nil
	}
	fmt.Fprintf(w, "Instance\tnot fixed by the request: algorithm %s chooses per request among\n", b.Algorithm)
	fmt.Fprintf(w, "\tSUB-CLUSTER\tINSTANCE\tWEIGHT\tIN-FLIGHT\tNEXT\n")
	for _, c := range b.Candidates {
		next := ""
		if c.Next {
			next = fmt.Sprintf("next pick (cursor 1 of %d)", b.Cursors)
		}
		fmt.Fprintf(w, "\t%s\t%s\t%d\t%d\t%s\n", c.SubCluster, c.Addr, c.Weight, c.InFlight, next)
	}
	return nil
}

// decidedBy words balance.Explanation.InstanceBy.
var decidedBy = map[string]string{
	"cookie": "its sticky cookie", "hash": "the request's hash", "first": "the first available instance",
	"only-available": "the only available instance",
}

// shares prints an effective row: "GSLB_BLACKHOLE 10.0%, SC1 45.0%, SC2 45.0%".
func shares(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.1f%%", n, m[n])
	}
	return strings.Join(parts, ", ")
}
