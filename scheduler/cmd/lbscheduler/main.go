// Command lbscheduler computes the W matrix and publishes versioned
// snapshots to etcd as the elected leader; `lbscheduler plan` computes a
// scenario file offline.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sluicelb/sluice/api/logrepeat"
	"github.com/sluicelb/sluice/scheduler/lbscheduler"
	"github.com/sluicelb/sluice/scheduler/scenario"

	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/tlsfiles"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	if err := newApp(os.Stdout).Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lbscheduler:", err)
		os.Exit(1)
	}
}

func newApp(out io.Writer) *cli.App {
	return &cli.App{
		Name:      "lbscheduler",
		Usage:     "compute Sluice weight matrices and publish them to etcd",
		Version:   version, // --version, as lbproxy and lbctl have
		Writer:    out,
		ErrWriter: os.Stderr,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "id", Usage: "scheduler id (also the snapshot author)", EnvVars: []string{"SLUICE_SCHEDULER_ID"}},
			&cli.StringFlag{Name: "api", Usage: "HTTP API address (non-loopback needs --api-token)", Value: "127.0.0.1:9400", EnvVars: []string{"SLUICE_SCHEDULER_API"}},
			&cli.StringFlag{Name: "api-token", Usage: "bearer token required by the HTTP API", EnvVars: []string{"SLUICE_SCHEDULER_API_TOKEN"}},
			&cli.DurationFlag{Name: "session-ttl", Usage: "leader lease TTL", Value: 5 * time.Second, EnvVars: []string{"SLUICE_SESSION_TTL"}},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: []string{"SLUICE_LOG_LEVEL"}},
			&cli.BoolFlag{Name: "no-pointer-push", Usage: "write snapshot pointers without the new version's manifest and parts (while proxies of a release before the push still watch: they refuse such pointers)", EnvVars: []string{"SLUICE_NO_POINTER_PUSH"}},
		}, etcdclient.Flags("http://127.0.0.1:2379")...),
		Action: runScheduler,
		Commands: []*cli.Command{
			{
				Name:  "plan",
				Usage: "compute a scenario file offline (no etcd) and print the matrix",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: "scenario file (YAML or JSON; - for stdin)", Required: true},
					&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "table or json", Value: "table"},
				},
				Action: runPlan,
			},
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					_, err := fmt.Fprintln(c.App.Writer, "lbscheduler", version)
					return err
				},
			},
		},
	}
}

func runPlan(c *cli.Context) error {
	format := c.String("output")
	if format != "table" && format != "json" {
		return fmt.Errorf("--output %q: want table or json", format)
	}
	var raw []byte
	var err error
	if in := c.String("input"); in == "-" {
		raw, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	} else {
		raw, err = os.ReadFile(in)
	}
	if err != nil {
		return fmt.Errorf("read scenario: %w", err)
	}
	rep, err := scenario.Run(raw)
	if err != nil {
		return fmt.Errorf("scenario %s: %w", c.String("input"), err)
	}
	return rep.Render(c.App.Writer, format)
}

func runScheduler(c *cli.Context) error {
	if c.Args().Present() {
		return fmt.Errorf("unknown command %q (see --help)", c.Args().First())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(logrepeat.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}), 0))
	slog.SetDefault(log)
	if c.String("id") == "" {
		return errors.New("--id is required (or SLUICE_SCHEDULER_ID)")
	}
	ec := etcdclient.FromFlags(c)
	tlsCfg, err := etcdTLS(ec.CACert, ec.Cert, ec.Key)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg := lbscheduler.Config{
		ID:            c.String("id"),
		Endpoints:     ec.Endpoints,
		TLS:           tlsCfg,
		Username:      ec.Username,
		Password:      ec.Password,
		DialTimeout:   ec.DialTimeout,
		Prefix:        c.String("prefix"),
		APIAddr:       c.String("api"),
		APIToken:      c.String("api-token"),
		SessionTTL:    c.Duration("session-ttl"),
		NoPointerPush: c.Bool("no-pointer-push"),
		Logger:        log,
	}
	// Run resigns leadership and revokes the session when ctx ends (SIGTERM).
	err = lbscheduler.Run(ctx, cfg)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func etcdTLS(ca, cert, key string) (*tls.Config, error) {
	c, err := tlsfiles.Client(ca, cert, key)
	if err != nil {
		return nil, fmt.Errorf("--etcd-cacert/--etcd-cert/--etcd-key: %w", err)
	}
	return c, nil
}
