package lbctl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// parsedArgs is the command line rearranged for urfave/cli, which reads a
// command's flags only between its name and its first positional argument
// and a global flag only before the first command name.
type parsedArgs struct {
	args    []string // argv for app.Run
	version bool     // --version was given as a global flag
}

// arrange checks the command line the way kubectl users expect and
// rearranges it for urfave/cli:
//
//   - a global flag (-o, --endpoints, --timeout, …) may come before or after
//     the command: it is moved in front of the command path; a command's own
//     flag of the same name (rollout status --version) wins after it;
//   - a command's flags and positional arguments may be interleaved
//     (`weights set --cluster C SC1=45 SC2=55 --reason R`);
//   - a word that names no command where a command is expected is a usage
//     error with a suggestion, never a help page with exit 0;
//   - a flag that takes one value may be given once (`drain --subcluster SC1
//     --subcluster SC2` is refused, not silently reduced to SC2).
func arrange(app *cli.App, argv []string) (parsedArgs, error) {
	if len(argv) == 0 {
		return parsedArgs{args: argv}, nil
	}
	type level struct {
		name  string
		cmd   *cli.Command
		flags []string
	}
	var (
		globals []string
		levels  []level
		pos     []string
		p       parsedArgs
		seen    = map[string]string{} // scope+flag -> first value
		given   = map[string]bool{}   // flags of the deepest command given, by first name
	)
	path := func() string {
		s := "lbctl"
		for _, l := range levels {
			s += " " + l.name
		}
		return s
	}
	cur := func() *cli.Command {
		if len(levels) == 0 {
			return nil
		}
		return levels[len(levels)-1].cmd
	}
	rest := argv[1:]
	for len(rest) > 0 {
		a := rest[0]
		rest = rest[1:]
		if a == "--" {
			pos = append(pos, rest...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			var (
				f     cli.Flag
				scope string
			)
			if c := cur(); c != nil {
				f, scope = findFlag(c.Flags, name), path()
			}
			global := false
			if f == nil {
				if g := findFlag(app.Flags, name); g != nil {
					f, scope, global = g, "lbctl", true
				}
			}
			tokens := []string{a}
			value := ""
			if f != nil && !isBool(f) && !hasValue && len(rest) > 0 {
				tokens = append(tokens, rest[0])
				value = rest[0]
				rest = rest[1:]
			} else if hasValue {
				_, value, _ = strings.Cut(a, "=")
			}
			if f != nil && !global {
				given[f.Names()[0]] = true
			}
			if f == cli.HelpFlag {
				given["help"] = true
			}
			if f != nil && !isBool(f) && !isMulti(f) {
				key := scope + " --" + f.Names()[0]
				if first, dup := seen[key]; dup {
					return p, usageMsg("--%s given twice (%q and %q); it takes one value: run %s once per value",
						f.Names()[0], first, value, path())
				}
				seen[key] = value
			}
			switch {
			case global && name == "version":
				p.version = true
			case global || len(levels) == 0:
				globals = append(globals, tokens...)
			default:
				levels[len(levels)-1].flags = append(levels[len(levels)-1].flags, tokens...)
			}
			continue
		}
		// A positional word: a command name while the current level has
		// subcommands and no positional argument was given yet.
		subs := app.Commands
		if c := cur(); c != nil {
			subs = c.Subcommands
		}
		descending := len(pos) == 0 && (len(levels) == 0 || len(subs) > 0) &&
			(len(levels) == 0 || levels[len(levels)-1].name != "help")
		if !descending {
			pos = append(pos, a)
			continue
		}
		if a == "help" || a == "h" {
			levels = append(levels, level{name: "help"})
			continue
		}
		next := findCommand(subs, a)
		if next == nil {
			return p, unknownCommand(a, path(), subs)
		}
		levels = append(levels, level{name: a, cmd: next})
		clear(given)
	}
	if n := len(levels); n > 0 && levels[n-1].cmd != nil && !given["help"] {
		if err := checkCommandLine(levels[n-1].cmd, given, pos, path()); err != nil {
			return p, err
		}
	}
	out := append([]string{argv[0]}, globals...)
	for _, l := range levels {
		out = append(out, l.name)
		out = append(out, l.flags...)
	}
	if len(pos) > 0 {
		out = append(out, "--")
		out = append(out, pos...)
	}
	p.args = out
	return p, nil
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	if name == "help" || name == "h" {
		return cli.HelpFlag
	}
	return nil
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func isBool(f cli.Flag) bool {
	_, ok := f.(*cli.BoolFlag)
	return ok
}

func isMulti(f cli.Flag) bool {
	switch f.(type) {
	case *cli.StringSliceFlag, *cli.IntSliceFlag, *cli.Int64SliceFlag, *cli.Float64SliceFlag, *cli.Uint64SliceFlag, *cli.UintSliceFlag:
		return true
	}
	return false
}

// unknownCommand words the error for a word that names no command of path.
func unknownCommand(word, path string, cmds []*cli.Command) error {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Name)
		}
	}
	if s := suggest(word, names); s != "" {
		return usageMsg("unknown command %q for %s; did you mean %s?", word, path, s)
	}
	return usageMsg("unknown command %q for %s; the commands are: %s (see %s --help)", word, path, strings.Join(names, ", "), path)
}

// suggest returns the candidate closest to word: a prefix either way, or an
// edit distance of at most 2 (the rule cobra uses for kubectl).
func suggest(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		d := editDistance(strings.ToLower(word), c)
		if strings.HasPrefix(c, word) || strings.HasPrefix(word, c) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkCommandLine checks what urfave/cli would otherwise answer with a
// help page: required flags first (so that a missing --cluster is the first
// thing said), then positional arguments given to a command that takes none
// (a command that takes some says so in its ArgsUsage).
func checkCommandLine(cmd *cli.Command, given map[string]bool, pos []string, path string) error {
	var missing []string
	for _, f := range cmd.Flags {
		if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() && !given[f.Names()[0]] {
			missing = append(missing, "--"+f.Names()[0])
		}
	}
	if len(missing) > 0 {
		list := missing[0]
		if len(missing) > 1 {
			list = strings.Join(missing[:len(missing)-1], ", ") + " and " + missing[len(missing)-1]
		}
		return usageMsg("%s needs %s (see %s --help)", path, list, path)
	}
	if len(pos) > 0 && cmd.ArgsUsage == "" && len(cmd.Subcommands) == 0 {
		return usageMsg("%s takes no arguments, got %q (see %s --help)", path, strings.Join(pos, " "), path)
	}
	return nil
}

// usageMsg is a usage error (exit 2) whose text says what is wrong by
// itself, without the "usage:" prefix.
func usageMsg(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// versionLine is what both `lbctl version` and `lbctl --version` print.
func versionLine() string { return fmt.Sprintf("lbctl %s\n", Version) }
