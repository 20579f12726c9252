package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/sluicelb/sluice/api/keys"
)

// Access is a parsed access file: roles with key permissions and users
// holding roles. Every user gets a client certificate whose CN is its name;
// etcd authenticates it by that CN (no passwords exist).
type Access struct {
	Roles map[string][]Perm
	Users map[string][]string // user -> roles
	Order []string            // users in file order
}

// Perm is one etcd permission: Key alone, or the range [Key, prefix end).
type Perm struct {
	Write, Read bool
	Key         string
	Prefix      bool
}

// parseAccess reads the access file format:
//
//	role <name>
//	  read|write|readwrite <kind> [names...]
//	user <name> <role>...
//
// kinds: all, desired, shifts, shift-progress, instances [cluster sub ip:port],
// demand [proxyCluster [proxyID]], status [proxyCluster [proxyID]],
// last-seen [proxyCluster [proxyID]], snapshots [proxyCluster], parts,
// current [proxyCluster], lineage, election, leader, scheduler-status.
// Keys come from api/keys; a kind without its last names is a prefix.
func parseAccess(path string, layout keys.Layout) (*Access, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("access file: %w", err)
	}
	a := &Access{Roles: map[string][]Perm{}, Users: map[string][]string{}}
	role := ""
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", path, n)
		switch f[0] {
		case "role":
			if len(f) != 2 {
				return nil, fmt.Errorf("%s: want \"role <name>\"", where)
			}
			role = f[1]
			a.Roles[role] = a.Roles[role][:0:0]
		case "user":
			if len(f) < 3 {
				return nil, fmt.Errorf("%s: want \"user <name> <role>...\"", where)
			}
			if err := keys.ValidName(f[1]); err != nil {
				return nil, fmt.Errorf("%s: user: %w", where, err)
			}
			if _, dup := a.Users[f[1]]; dup {
				return nil, fmt.Errorf("%s: user %q declared twice", where, f[1])
			}
			a.Users[f[1]] = f[2:]
			a.Order = append(a.Order, f[1])
			role = ""
		case "read", "write", "readwrite":
			if role == "" {
				return nil, fmt.Errorf("%s: permission %q outside a role block", where, f[0])
			}
			if len(f) < 2 {
				return nil, fmt.Errorf("%s: want \"%s <kind> [names...]\"", where, f[0])
			}
			p, err := permKey(layout, f[1], f[2:])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			p.Read = f[0] != "write"
			p.Write = f[0] != "read"
			a.Roles[role] = append(a.Roles[role], p)
		default:
			return nil, fmt.Errorf("%s: unknown directive %q; want role, user, read, write or readwrite", where, f[0])
		}
	}
	for u, roles := range a.Users {
		for _, r := range roles {
			if _, ok := a.Roles[r]; !ok {
				return nil, fmt.Errorf("%s: user %q has undeclared role %q", path, u, r)
			}
		}
	}
	return a, sc.Err()
}

func permKey(l keys.Layout, kind string, args []string) (Perm, error) {
	want := func(max int) error {
		if len(args) > max {
			return fmt.Errorf("kind %q takes at most %d names, got %q", kind, max, args)
		}
		return nil
	}
	prefix := func(k string) (Perm, error) { return Perm{Key: k, Prefix: true}, nil }
	exact := func(k string, err error) (Perm, error) { return Perm{Key: k}, err }
	pfx := func(k string, err error) (Perm, error) { return Perm{Key: k, Prefix: true}, err }
	switch kind {
	case "all":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return prefix(l.Root())
	case "desired":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return exact(l.Desired(), nil)
	case "shifts":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return prefix(l.ShiftsPrefix())
	case "shift-progress":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return prefix(l.ShiftProgressPrefix())
	case "parts":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return prefix(l.PartsPrefix())
	case "election":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return prefix(l.Election())
	case "leader":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return exact(l.Leader(), nil)
	case "lineage":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return exact(l.Lineage(), nil)
	case "scheduler-status":
		if err := want(0); err != nil {
			return Perm{}, err
		}
		return exact(l.SchedulerStatus(), nil)
	case "last-seen":
		switch len(args) {
		case 0, 1:
			return pfx(l.LastSeenPrefix(strings.Join(args, "")))
		case 2:
			return exact(l.LastSeen(args[0], args[1]))
		}
		return Perm{}, fmt.Errorf("kind last-seen takes at most 2 names, got %q", args)
	case "instances":
		if len(args) == 0 {
			return prefix(l.InstancesPrefix())
		}
		if len(args) != 3 {
			return Perm{}, fmt.Errorf("kind instances takes no names or <cluster> <subcluster> <ip:port>, got %q", args)
		}
		ap, err := netip.ParseAddrPort(args[2])
		if err != nil {
			return Perm{}, fmt.Errorf("instances address %q: %w", args[2], err)
		}
		return exact(l.Instance(args[0], args[1], ap))
	case "status", "demand":
		if err := want(2); err != nil {
			return Perm{}, err
		}
		switch len(args) {
		case 0:
			if kind == "demand" {
				return prefix(l.DemandPrefix())
			}
			return pfx(l.StatusPrefix(""))
		case 1:
			if kind == "demand" {
				k, err := l.Demand(args[0], "x")
				return pfx(strings.TrimSuffix(k, "x"), err)
			}
			return pfx(l.StatusPrefix(args[0]))
		default:
			if kind == "demand" {
				return exact(l.Demand(args[0], args[1]))
			}
			return exact(l.Status(args[0], args[1]))
		}
	case "snapshots":
		if err := want(1); err != nil {
			return Perm{}, err
		}
		if len(args) == 0 {
			return pfx(l.SnapshotPrefix(""))
		}
		return pfx(l.SnapshotPrefix(args[0]))
	case "current":
		if err := want(1); err != nil {
			return Perm{}, err
		}
		if len(args) == 0 {
			return prefix(l.CurrentPrefix())
		}
		// A prefix, so that list-then-watch with WithPrefix is permitted.
		return pfx(l.Current(args[0]))
	}
	return Perm{}, fmt.Errorf("unknown key kind %q; want all, desired, shifts, shift-progress, instances, demand, status, last-seen, snapshots, parts, current, lineage, election, leader or scheduler-status", kind)
}
