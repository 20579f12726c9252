package lbctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// A proxy's runtime overrides (its admin API's /v1/overrides): one proxy,
// one instance, an expiry always. They live in that proxy's memory only.
func overrideCommand() *cli.Command {
	proxy := func() cli.Flag {
		return &cli.StringFlag{Name: "proxy", Required: true, Usage: "the proxy's admin address, host:port"}
	}
	instance := func() cli.Flag {
		return &cli.StringFlag{Name: "instance", Required: true, Usage: "the backend instance, ip:port"}
	}
	return &cli.Command{
		Name:  "override",
		Usage: "a proxy's runtime overrides of one instance: drain it or change its weight, for a while",
		Description: "Overrides act on one proxy (its admin API) and expire after --ttl; they are not in etcd and do not\n" +
			"survive a restart of the proxy. To take a sub-cluster out of service everywhere, use lbctl drain.",
		Subcommands: []*cli.Command{
			{
				Name:      "set",
				Usage:     "drain an instance, or change its weight, on one proxy until --ttl passes",
				UsageText: "lbctl override set --proxy ADMIN_ADDR --instance IP:PORT (--drain | --weight N) [--ttl 10m]",
				Flags: []cli.Flag{proxy(), instance(),
					&cli.BoolFlag{Name: "drain", Usage: "take the instance out of rotation (requests in flight finish)"},
					&cli.IntFlag{Name: "weight", Value: -1, Usage: "use this weight instead of the configured one"},
					&cli.DurationFlag{Name: "ttl", Value: 10 * time.Minute, Usage: "the override expires after this long"},
				},
				Action: action(overrideSet),
			},
			{
				Name:      "list",
				Usage:     "the overrides a proxy holds",
				UsageText: "lbctl override list --proxy ADMIN_ADDR [-o json]",
				Flags:     []cli.Flag{proxy()},
				Action:    action(overrideList),
			},
			{
				Name:      "clear",
				Usage:     "drop an instance's override on one proxy now",
				UsageText: "lbctl override clear --proxy ADMIN_ADDR --instance IP:PORT",
				Flags:     []cli.Flag{proxy(), instance()},
				Action:    action(overrideClear),
			},
		},
	}
}

// overrideView is an override in lbctl's output.
type overrideView struct {
	Action     string  `json:"action,omitempty"` // set, cleared (writes only)
	Proxy      string  `json:"proxy"`
	Instance   string  `json:"instance"`
	Weight     *int    `json:"weight,omitempty"`
	Drain      bool    `json:"drain,omitempty"`
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
}

func (o overrideView) what() string {
	var parts []string
	if o.Drain {
		parts = append(parts, "drained")
	}
	if o.Weight != nil {
		parts = append(parts, fmt.Sprintf("weight %d", *o.Weight))
	}
	return strings.Join(parts, ", ")
}

func instanceFlag(e *env) (string, error) {
	s := e.c.String("instance")
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		return "", usageErr("--instance %q: want ip:port, e.g. 127.0.0.1:18001", s)
	}
	return a.String(), nil
}

func overrideSet(e *env) error {
	inst, err := instanceFlag(e)
	if err != nil {
		return err
	}
	v := overrideView{Action: "set", Proxy: e.c.String("proxy"), Instance: inst, Drain: e.c.Bool("drain"), TTLSeconds: e.c.Duration("ttl").Seconds()}
	if e.c.IsSet("weight") {
		w := e.c.Int("weight")
		v.Weight = &w
	}
	if !v.Drain && v.Weight == nil {
		return usageErr("lbctl override set needs --drain or --weight N")
	}
	if e.c.Duration("ttl") <= 0 {
		return usageErr("--ttl %s: an override must expire; give a positive duration such as 10m", e.c.Duration("ttl"))
	}
	body := map[string]any{"addr": inst, "drain": v.Drain, "ttl": e.c.Duration("ttl").String()}
	if v.Weight != nil {
		body["weight"] = *v.Weight
	}
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := e.api().do(ctx, http.MethodPost, withScheme(v.Proxy)+"/v1/overrides", body, nil); err != nil {
		return fmt.Errorf("override of %s on proxy %s: %w", inst, v.Proxy, err)
	}
	return e.wrote(v, fmt.Sprintf("Override on proxy %s: %s %s for %s. Clear it with: lbctl override clear --proxy %s --instance %s\n",
		v.Proxy, inst, v.what(), e.c.Duration("ttl"), v.Proxy, inst))
}

func overrideClear(e *env) error {
	inst, err := instanceFlag(e)
	if err != nil {
		return err
	}
	v := overrideView{Action: "cleared", Proxy: e.c.String("proxy"), Instance: inst}
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := e.api().do(ctx, http.MethodDelete, withScheme(v.Proxy)+"/v1/overrides/"+url.PathEscape(inst), nil, nil); err != nil {
		return fmt.Errorf("clear the override of %s on proxy %s: %w", inst, v.Proxy, err)
	}
	return e.wrote(v, fmt.Sprintf("Cleared the override of %s on proxy %s.\n", inst, v.Proxy))
}

func overrideList(e *env) error {
	p := e.c.String("proxy")
	ctx, cancel := e.ctx()
	defer cancel()
	list, err := fetchOverrides(ctx, e, p)
	if err != nil {
		return err
	}
	return e.render(list, func(w io.Writer) error {
		fmt.Fprintln(w, "INSTANCE\tWEIGHT\tDRAIN\tTTL")
		for _, o := range list {
			weight, drain := "-", ""
			if o.Weight != nil {
				weight = strconv.Itoa(*o.Weight)
			}
			if o.Drain {
				drain = "drained"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", o.Instance, weight, drain, time.Duration(o.TTLSeconds*float64(time.Second)))
		}
		if len(list) == 0 {
			fmt.Fprintf(w, "(no overrides on proxy %s)\n", p)
		}
		return nil
	})
}

// fetchOverrides reads GET /v1/overrides: {"ip:port": {"weight", "drain",
// "ttl"}}, the TTL in nanoseconds (or, tolerated, a Go duration string or
// "ttl_seconds").
func fetchOverrides(ctx context.Context, e *env, proxy string) ([]overrideView, error) {
	var raw map[string]struct {
		Weight     *int            `json:"weight"`
		Drain      bool            `json:"drain"`
		TTL        json.RawMessage `json:"ttl"`
		TTLSeconds *float64        `json:"ttl_seconds"`
	}
	if _, err := e.api().do(ctx, http.MethodGet, withScheme(proxy)+"/v1/overrides", nil, &raw); err != nil {
		return nil, fmt.Errorf("overrides of proxy %s: %w", proxy, err)
	}
	list := []overrideView{}
	for inst, o := range raw {
		v := overrideView{Proxy: proxy, Instance: inst, Weight: o.Weight, Drain: o.Drain}
		var ns int64
		var s string
		switch {
		case o.TTLSeconds != nil:
			v.TTLSeconds = *o.TTLSeconds
		case json.Unmarshal(o.TTL, &ns) == nil:
			v.TTLSeconds = time.Duration(ns).Seconds()
		case json.Unmarshal(o.TTL, &s) == nil:
			if d, err := time.ParseDuration(s); err == nil {
				v.TTLSeconds = d.Seconds()
			}
		}
		list = append(list, v)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Instance < list[j].Instance })
	return list, nil
}
