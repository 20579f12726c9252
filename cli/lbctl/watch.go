package lbctl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/keys"
)

// watchFlag is --watch of weights get, proxies and health.
func watchFlag() cli.Flag {
	return &cli.BoolFlag{Name: "watch", Aliases: []string{"w"},
		Usage: "print again on every change in etcd, until Ctrl-C (or --timeout, when given)"}
}

// watchable makes draw a command body that honours --watch: without it
// draw runs once; with it draw runs again whenever a key under one of
// prefixes changes, like kubectl get -w, and its output (the whole table,
// or one JSON/YAML document) is printed each time it differs from the last.
// The watch ends cleanly, exit 0, on SIGINT or SIGTERM, at the end of the
// command's context, and after --timeout when --timeout is given
// explicitly; each draw's reads are bounded by --timeout.
func watchable(draw func(e *env) error, prefixes func(l keys.Layout) []string) func(e *env) error {
	return func(e *env) error {
		if !e.c.Bool("watch") {
			return draw(e)
		}
		return e.watch(draw, prefixes(e.layout))
	}
}

func (e *env) watch(draw func(e *env) error, prefixes []string) error {
	ctx, stop := signal.NotifyContext(e.c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if e.c.IsSet("timeout") {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	cli, err := e.etcd()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	changes := cli.Watch(wctx, e.layout.Root(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	out, last := e.out, ""
	e.base = ctx
	defer func() { e.out, e.base = out, nil }()
	for {
		var buf bytes.Buffer
		e.out = &buf
		err := draw(e)
		e.out = out
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if s := buf.String(); s != last {
			if last != "" && e.format == "table" {
				fmt.Fprintln(out)
			}
			if _, err := io.WriteString(out, s); err != nil {
				return err
			}
			last = s
		}
		if err := waitChange(ctx, changes, prefixes); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// waitChange returns when a key under one of prefixes changed, or nil when
// ctx ends.
func waitChange(ctx context.Context, changes clientv3.WatchChan, prefixes []string) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r, ok := <-changes:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("the etcd watch ended")
			}
			if err := r.Err(); err != nil {
				return fmt.Errorf("watch etcd: %w", err)
			}
			for _, ev := range r.Events {
				for _, p := range prefixes {
					if strings.HasPrefix(string(ev.Kv.Key), p) {
						return nil
					}
				}
			}
		}
	}
}

// instancesKeys are what lbctl health shows.
func instancesKeys(l keys.Layout) []string { return []string{l.InstancesPrefix()} }

// proxyKeys are what lbctl proxies shows: statuses and live versions.
func proxyKeys(l keys.Layout) []string {
	status, _ := l.StatusPrefix("")
	return []string{status, l.CurrentPrefix()}
}
