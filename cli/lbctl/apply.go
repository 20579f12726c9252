package lbctl

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

func applyCommand() *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "write the desired state from a file (validated, diffed, compare-and-swap)",
		UsageText: "lbctl apply -f FILE [--yes] [--expect-revision N]",
		Description: "Validates FILE (YAML or JSON desired state), shows the difference to the stored state and asks before\n" +
			"writing unless --yes. The write is a compare-and-swap on the revision read: if someone else changed the\n" +
			"state meanwhile, nothing is written and lbctl exits 3 (conflict). A state the scheduler could not publish (e.g. a\n" +
			"pinned row left with nothing but GSLB_BLACKHOLE) is refused with the reason; nothing is written (exit 1).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Required: true, Usage: "desired state file (YAML or JSON; - for stdin)"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask for confirmation"},
			&cli.Int64Flag{Name: "expect-revision", Value: -1, Usage: "write only if the stored state is at this etcd revision (0: only if none is stored)"},
			&cli.BoolFlag{Name: allowFullDropFlag, Usage: "give allow_full_drop to pinned rows the file leaves with nothing to serve (refused otherwise)"},
		}, writeWaitFlags()...),
		Action: action(func(e *env) error {
			next, err := loadStateFile(e.c.String("file"), e.c.App.Reader)
			if err != nil {
				return fmt.Errorf("%w\nnothing was written", err)
			}
			ctx, cancel := e.ctx()
			defer cancel()
			cur, err := e.readState(ctx)
			if err != nil {
				return err
			}
			rev := cur.Revision
			if r := e.c.Int64("expect-revision"); r >= 0 {
				rev = r
			}
			var before []byte
			cur.State.Urgent, next.Urgent = nil, nil // a mark of the write, not of its content
			if cur.Revision != 0 {
				before, _ = yaml.Marshal(&cur.State)
			}
			after, _ := yaml.Marshal(next)
			d := lineDiff(string(before), string(after))
			if d == "" && cur.Revision != 0 {
				return e.wrote(writeResult{Action: "unchanged", Revision: cur.Revision}, "No changes: the stored desired state is already this.\n")
			}
			fmt.Fprintf(e.info(), "Changes to the desired state (revision %d):\n%s", cur.Revision, d)
			if !e.c.Bool("yes") {
				if !confirm(e, "Apply these changes?") {
					return withCode(ExitAborted, fmt.Errorf("not applied"))
				}
			}
			e.writing = "the state in " + e.c.String("file")
			newRev, err := e.writeState(ctx, next, rev)
			if err != nil {
				return err
			}
			return e.wroteDesired(writeResult{Action: "applied", Revision: newRev, PreviousRevision: cur.Revision},
				fmt.Sprintf("Applied: desired state is now at revision %d.", newRev), "")
		}),
	}
}

func confirm(e *env, q string) bool {
	fmt.Fprintf(e.info(), "%s [y/N] ", q)
	line, _ := bufio.NewReader(e.c.App.Reader).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

func readInput(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(stdin, codec.MaxDocument+1))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// loadStateFile reads, strictly decodes and validates a desired state file.
func loadStateFile(path string, stdin io.Reader) (*config.State, error) {
	raw, err := readInput(path, stdin)
	if err != nil {
		return nil, err
	}
	var s config.State
	if err := codec.Unmarshal(raw, &s); err != nil {
		return nil, inFile(path, raw, err)
	}
	if err := validate.State(&s); err != nil {
		return nil, fmt.Errorf("%s is not a valid desired state:\n%w", path, inFile(path, raw, err))
	}
	return &s, nil
}

func getCommand() *cli.Command {
	return &cli.Command{
		Name:  "get",
		Usage: "show stored objects",
		Subcommands: append([]*cli.Command{{
			Name:  "config",
			Usage: "print the stored desired state (YAML unless -o json)",
			Action: action(func(e *env) error {
				ctx, cancel := e.ctx()
				defer cancel()
				st, err := e.storedState(ctx)
				if err != nil {
					return err
				}
				if e.format == "json" {
					return e.render(&st.State, nil)
				}
				b, err := yaml.Marshal(&st.State)
				if err != nil {
					return err
				}
				if e.format == "table" {
					fmt.Fprintf(e.out, "# revision %d\n", st.Revision)
				}
				_, err = e.out.Write(b)
				return err
			}),
		}}, getSubcommands()...),
	}
}

func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check a desired state or snapshot file; exit 1 listing every error",
		UsageText: "lbctl validate -f FILE   (or: lbctl validate FILE)",
		ArgsUsage: "[FILE]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "file to check (YAML or JSON; - for stdin)"},
		},
		Action: action(func(e *env) error {
			path := e.c.String("file")
			if path == "" {
				path = e.c.Args().First()
			}
			if path == "" || e.c.NArg() > 1 {
				return usageErr("lbctl validate -f FILE")
			}
			raw, err := readInput(path, e.c.App.Reader)
			if err != nil {
				return err
			}
			j, err := codec.ToJSON(raw)
			if err != nil {
				return inFile(path, raw, err)
			}
			if codec.KindOf(j) == codec.KindSnapshot {
				s, err := snapshot.Unmarshal(j)
				if err != nil {
					return inFile(path, raw, err)
				}
				if err := validate.Snapshot(s); err != nil {
					return fmt.Errorf("%s is not a valid snapshot:\n%w", path, inFile(path, raw, err))
				}
				return e.wrote(validResult{File: path, Valid: true, Kind: "snapshot", ProxyCluster: s.Meta.ProxyCluster, Version: s.Meta.Version},
					fmt.Sprintf("%s: valid snapshot (%s v%d)\n", path, s.Meta.ProxyCluster, s.Meta.Version))
			}
			if _, err := loadStateFile(path, strings.NewReader(string(raw))); err != nil {
				return err
			}
			return e.wrote(validResult{File: path, Valid: true, Kind: "desired_state"}, fmt.Sprintf("%s: valid desired state\n", path))
		}),
	}
}

// validResult is validate's answer in JSON/YAML (errors go to stderr, exit 1).
type validResult struct {
	File         string `json:"file"`
	Valid        bool   `json:"valid"`
	Kind         string `json:"kind"` // desired_state or snapshot
	ProxyCluster string `json:"proxy_cluster,omitempty"`
	Version      uint64 `json:"version,omitempty"`
}
