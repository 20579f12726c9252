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
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "endpoints", Value: "127.0.0.1:2379", Usage: "etcd endpoints, comma-separated", EnvVars: []string{"SLUICE_ENDPOINTS", "SLUICE_ETCD"}},
			&cli.StringFlag{Name: "cacert", Usage: "CA bundle to verify etcd's certificate", EnvVars: []string{"SLUICE_ETCD_CACERT"}},
			&cli.StringFlag{Name: "cert", Usage: "client certificate for etcd mTLS", EnvVars: []string{"SLUICE_ETCD_CERT"}},
			&cli.StringFlag{Name: "key", Usage: "client key for etcd mTLS", EnvVars: []string{"SLUICE_ETCD_KEY"}},
			&cli.StringFlag{Name: "user", Usage: "etcd user name", EnvVars: []string{"SLUICE_ETCD_USER"}},
			&cli.StringFlag{Name: "password", Usage: "etcd password", EnvVars: []string{"SLUICE_ETCD_PASSWORD"}},
			&cli.StringFlag{Name: "prefix", Value: keys.DefaultPrefix, Usage: "etcd key prefix", EnvVars: []string{"SLUICE_PREFIX"}},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "timeout of each etcd or API call", EnvVars: []string{"SLUICE_TIMEOUT"}},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "output format: table, json or yaml", EnvVars: []string{"SLUICE_OUTPUT"}},
			&cli.StringFlag{Name: "scheduler", Usage: "scheduler API URL (default: the leader's address from etcd)", EnvVars: []string{"SLUICE_SCHEDULER"}},
			&cli.StringFlag{Name: "token", Usage: "bearer token for the scheduler and proxy admin APIs", EnvVars: []string{"SLUICE_TOKEN"}},
		},
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
			planCommand(), explainCommand(), healthCommand(), proxiesCommand(), bfeCommand(),
			{
				Name:  "version",
				Usage: "print lbctl's version",
				Action: func(c *cli.Context) error {
					fmt.Fprintf(c.App.Writer, "lbctl %s\n", Version)
					return nil
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
	app := App(stdout, stderr, stdin)
	err := app.Run(interspersed(app, args))
	if err != nil {
		fmt.Fprintln(stderr, "lbctl:", err)
	}
	if err == nil && len(args) > 1 && !knownCommand(app, args[1:]) {
		return ExitUsage
	}
	return ExitCode(err)
}

// knownCommand reports whether the first non-flag argument names a command
// (urfave/cli prints help and returns nil for unknown commands).
func knownCommand(app *cli.App, args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if !strings.Contains(a, "=") && takesValue(app.Flags, strings.TrimLeft(a, "-")) {
				i++
			}
			continue
		}
		return app.Command(a) != nil
	}
	return true
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
	return context.WithTimeout(e.c.Context, e.timeout)
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

// interspersed moves a command's positional arguments after its flags, so
// that `lbctl weights set --cluster C SC1=45 SC2=55 --reason R` works
// (urfave/cli stops reading flags at the first positional argument).
func interspersed(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	// Global flags, then the command path.
	flags := app.Flags
	cmds := app.Commands
	var cmd *cli.Command
	for len(rest) > 0 {
		a := rest[0]
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") {
			out = append(out, a)
			rest = rest[1:]
			if !strings.Contains(a, "=") && takesValue(flags, strings.TrimLeft(a, "-")) && len(rest) > 0 {
				out = append(out, rest[0])
				rest = rest[1:]
			}
			continue
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			break
		}
		cmd = next
		out = append(out, a)
		rest = rest[1:]
		flags, cmds = cmd.Flags, cmd.Subcommands
	}
	if cmd == nil {
		return args
	}
	var pos []string
	for len(rest) > 0 {
		a := rest[0]
		rest = rest[1:]
		switch {
		case a == "--":
			pos = append(pos, rest...)
			rest = nil
		case strings.HasPrefix(a, "-") && len(a) > 1:
			out = append(out, a)
			if !strings.Contains(a, "=") && takesValue(flags, strings.TrimLeft(a, "-")) && len(rest) > 0 {
				out = append(out, rest[0])
				rest = rest[1:]
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	return out
}

func takesValue(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
