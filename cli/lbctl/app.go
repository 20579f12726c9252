// Package lbctl is the operator's tool: it writes desired state, pins and
// shifts into etcd (compare-and-swap, validated first), shows the weight
// matrix, watches rollouts, explains picks and imports BFE configurations.
//
// Exit codes scripts can rely on:
//
//	0  success (rollout status: every live proxy runs the target version)
//	1  error (invalid input, etcd or API failure); nothing was written
//	2  usage error (unknown command or flag, missing argument)
//	3  conflict: the stored state changed since it was read; nothing was written
//	4  not converged: some proxies lag, reject or are stale (names printed)
//	5  aborted by the user (declined a confirmation)
package lbctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/keys"
)

// Exit codes.
const (
	ExitOK           = 0
	ExitError        = 1
	ExitUsage        = 2
	ExitConflict     = 3
	ExitNotConverged = 4
	ExitAborted      = 5
)

// Version is set at build time (-ldflags "-X .../cli/lbctl.Version=...").
var Version = "dev"

// exitError carries an exit code to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so that lbctl exits with code.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// ExitCode maps an error returned by App().Run to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	if strings.Contains(err.Error(), "flag provided but not defined") ||
		strings.Contains(err.Error(), "Required flag") ||
		strings.HasPrefix(err.Error(), "usage:") {
		return ExitUsage
	}
	return ExitError
}

// usageErr reports a usage mistake.
func usageErr(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf("usage: "+format, args...))
}

// App returns the lbctl application. Stdout and stdin are injectable so the
// tests run commands in-process.
func App(stdout, stderr io.Writer, stdin io.Reader) *cli.App {
	app := &cli.App{
		Name:                 "lbctl",
		Usage:                "operate a Sluice fleet: weights, shifts, rollouts, explanations, BFE import",
		Version:              Version,
		EnableBashCompletion: true,
		Writer:               stdout,
		ErrWriter:            stderr,
		Reader:               stdin,
		HideVersion:          true,
		Flags: append(etcdclient.Flags("127.0.0.1:2379"), []cli.Flag{
			&cli.StringFlag{Name: "author", Usage: "who writes, recorded with pins, drains and shifts when etcd auth is off (default $USER@host)", EnvVars: []string{"SLUICE_AUTHOR"}},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "timeout of each etcd or API call", EnvVars: []string{"SLUICE_TIMEOUT"}},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "output format: table, json or yaml", EnvVars: []string{"SLUICE_OUTPUT"}},
			&cli.StringFlag{Name: "scheduler", Usage: "scheduler API URL (default: the leader's address from etcd)", EnvVars: []string{"SLUICE_SCHEDULER"}},
			&cli.BoolFlag{Name: "version", Usage: "print lbctl's version (as lbctl version does)"},
			&cli.StringFlag{Name: "token", Usage: "bearer token for the scheduler and proxy admin APIs", EnvVars: []string{"SLUICE_TOKEN"}},
		}...),
		Before: func(c *cli.Context) error {
			switch c.String("output") {
			case "table", "json", "yaml":
				return nil
			}
			return usageErr("--output %q: want table, json or yaml", c.String("output"))
		},
		Commands: []*cli.Command{
			applyCommand(), getCommand(), validateCommand(),
			weightsCommand(), shiftCommand(), drainCommand(true), drainCommand(false),
			rolloutCommand(), historyCommand(), diffCommand(), rollbackCommand(),
			planCommand(), explainCommand(), healthCommand(), proxiesCommand(), bfeCommand(), overrideCommand(), completionCommand(),
			{
				Name:  "version",
				Usage: "print lbctl's version",
				Action: func(c *cli.Context) error {
					e, err := newEnv(c)
					if err != nil {
						return err
					}
					return e.wrote(map[string]string{"version": Version}, versionLine())
				},
			},
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(c.App.ErrWriter, "lbctl: unknown command %q; see lbctl --help\n", name)
		},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return withCode(ExitUsage, err)
		},
	}
	return app
}

// Main runs lbctl with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	return MainContext(context.Background(), args, stdout, stderr, stdin)
}

// MainContext is Main bounded by ctx: a command (a --watch) ends when ctx
// does.
func MainContext(ctx context.Context, args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	app := App(stdout, stderr, stdin)
	p, err := arrange(app, args)
	if err == nil && p.version {
		fmt.Fprint(stdout, versionLine())
		return ExitOK
	}
	if err == nil {
		err = app.RunContext(ctx, p.args)
	}
	if err != nil {
		fmt.Fprintln(stderr, "lbctl:", err)
	}
	return ExitCode(err)
}

// env is what every command needs: an etcd client, the key layout and the
// output settings.
type env struct {
	c       *cli.Context
	out     io.Writer
	layout  keys.Layout
	timeout time.Duration
	format  string
	client  *clientv3.Client
	etcdc   *etcdclient.Client // the client of client, for error wording
	base    context.Context    // bounds every call when set (a --watch); else the command's context
	// writing names the write for a refusal ("the drain of demo-main/SC2");
	// empty: the command's name.
	writing string
}

func newEnv(c *cli.Context) (*env, error) {
	l, err := keys.New(c.String("prefix"))
	if err != nil {
		return nil, usageErr("--prefix: %v", err)
	}
	return &env{c: c, out: c.App.Writer, layout: l, timeout: c.Duration("timeout"), format: c.String("output")}, nil
}

func (e *env) close() {
	if e.client != nil {
		e.client.Close()
	}
}

// ctx returns a context bounded by --timeout.
func (e *env) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.baseCtx(), e.timeout)
}

// baseCtx is the command's context (a --watch's when set), which ctx
// bounds.
func (e *env) baseCtx() context.Context {
	if e.base != nil {
		return e.base
	}
	return e.c.Context
}

// action wraps a command body with env setup and teardown.
func action(f func(e *env) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		e, err := newEnv(c)
		if err != nil {
			return err
		}
		defer e.close()
		return e.explain(f(e))
	}
}
