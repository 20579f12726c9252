// Command deploy-init prepares a Sluice deployment:
//
//	deploy-init certs --dir /certs --private-dir /certs-private --access access.conf --members etcd1,etcd2,etcd3
//	    a CA, one server+peer certificate per etcd member and one client
//	    certificate per user of the access file (CN = user name) plus root;
//	    existing files are kept, so it is safe at every start.
//	deploy-init bootstrap --endpoints https://etcd1:2379 --certs /certs-private --access access.conf --desired state.yaml
//	    waits for etcd, creates the roles and users of the access file
//	    (certificate-only users, no passwords), enables auth and writes the
//	    desired state if none exists yet. Idempotent.
//	deploy-init secrets --env-file .env
//	    writes random admin/API tokens to an env file unless it exists.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/validate"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: deploy-init certs|bootstrap|secrets [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "certs":
		err = runCerts(os.Args[2:])
	case "bootstrap":
		err = runBootstrap(os.Args[2:])
	case "secrets":
		err = runSecrets(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q; want certs, bootstrap or secrets", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy-init:", err)
		os.Exit(1)
	}
}

func runCerts(args []string) error {
	fl := flag.NewFlagSet("certs", flag.ExitOnError)
	dir := fl.String("dir", "/certs", "output directory (ca.pem, etcd members, users)")
	private := fl.String("private-dir", "", "directory of the CA key and root's certificate (default: --dir); mount it only where root is needed")
	access := fl.String("access", "access.conf", "access file (users get client certificates)")
	members := fl.String("members", "etcd1,etcd2,etcd3", "etcd member names (server certificates)")
	owner := fl.Int("owner", -1, "uid:gid (same number) owning the files; -1 keeps the caller's")
	prefix := fl.String("prefix", keys.DefaultPrefix, "etcd key prefix")
	_ = fl.Parse(args)
	layout, err := keys.New(*prefix)
	if err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	acc, err := parseAccess(*access, layout)
	if err != nil {
		return err
	}
	if *private == "" {
		*private = *dir
	}
	for _, d := range []string{*dir, *private} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	now := time.Now()
	c, created, err := loadOrCreateCA(*private, now)
	if err != nil {
		return err
	}
	if *private != *dir {
		caPEM, err := os.ReadFile(filepath.Join(*private, "ca.pem"))
		if err != nil {
			return err
		}
		if err := writeAtomic(filepath.Join(*dir, "ca.pem"), caPEM, 0o644); err != nil {
			return err
		}
	}
	n := 0
	if created {
		n++
	}
	for _, m := range splitList(*members) {
		ok, err := c.issue(*dir, m, true, nil, now)
		if err != nil {
			return err
		}
		n += b2i(ok)
	}
	ok, err := c.issue(*private, "root", false, nil, now)
	if err != nil {
		return err
	}
	n += b2i(ok)
	for _, u := range acc.Order {
		ok, err := c.issue(*dir, u, false, nil, now)
		if err != nil {
			return err
		}
		n += b2i(ok)
	}
	for _, d := range []string{*dir, *private} {
		if *owner < 0 {
			break
		}
		err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, *owner, *owner)
		})
		if err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	fmt.Printf("certificates in %s: %d created, CA %s\n", *dir, n, map[bool]string{true: "new", false: "kept"}[created])
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func runBootstrap(args []string) error {
	fl := flag.NewFlagSet("bootstrap", flag.ExitOnError)
	endpoints := fl.String("endpoints", "https://etcd1:2379,https://etcd2:2379,https://etcd3:2379", "etcd endpoints")
	certs := fl.String("certs", "/certs-private", "directory holding ca.pem, root.pem and root-key.pem")
	access := fl.String("access", "access.conf", "access file")
	desired := fl.String("desired", "", "desired state (YAML or JSON) written if none exists; empty skips")
	prefix := fl.String("prefix", keys.DefaultPrefix, "etcd key prefix")
	wait := fl.Duration("wait", 2*time.Minute, "how long to wait for etcd")
	_ = fl.Parse(args)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	layout, err := keys.New(*prefix)
	if err != nil {
		return fmt.Errorf("--prefix: %w", err)
	}
	acc, err := parseAccess(*access, layout)
	if err != nil {
		return err
	}
	var stateJSON []byte
	if *desired != "" {
		raw, err := os.ReadFile(*desired)
		if err != nil {
			return fmt.Errorf("--desired: %w", err)
		}
		var st config.State
		if err := codec.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("--desired %s: %w", *desired, err)
		}
		if err := validate.State(&st); err != nil {
			return fmt.Errorf("--desired %s: %w", *desired, err)
		}
		if stateJSON, err = json.Marshal(&st); err != nil {
			return err
		}
	}
	// root authenticates with its client certificate (CN root); the one
	// etcd client constructor (api/etcdclient) as in every component.
	cli, err := etcdclient.New(etcdclient.Config{
		Endpoints: splitList(*endpoints),
		CACert:    filepath.Join(*certs, "ca.pem"),
		Cert:      filepath.Join(*certs, "root.pem"),
		Key:       filepath.Join(*certs, "root-key.pem"),
		Logger:    log,
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	for {
		c, cc := context.WithTimeout(ctx, 3*time.Second)
		_, err := cli.Get(c, layout.Desired())
		cc()
		if err == nil {
			break
		}
		err = cli.Explain(err, layout.Desired())
		log.Info("waiting for etcd", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd not ready after %s: %w", *wait, err)
		case <-time.After(time.Second):
		}
	}
	if err := applyAccess(ctx, cli.Client, acc, log); err != nil {
		return err
	}
	if stateJSON != nil {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(layout.Desired()), "=", 0)).
			Then(clientv3.OpPut(layout.Desired(), string(stateJSON))).Commit()
		if err != nil {
			return fmt.Errorf("write desired state: %w", err)
		}
		log.Info("desired state", "written", r.Succeeded, "key", layout.Desired())
	}
	return nil
}

// applyAccess makes etcd's roles and users match acc (roles' permissions
// are replaced, users' roles added) and enables auth.
func applyAccess(ctx context.Context, cli *clientv3.Client, acc *Access, log *slog.Logger) error {
	noPass := &clientv3.UserAddOptions{NoPassword: true}
	ensureUser := func(u string) error {
		if _, err := cli.UserGet(ctx, u); err == nil {
			return nil
		}
		if _, err := cli.UserAddWithOptions(ctx, u, "", noPass); err != nil {
			return fmt.Errorf("user add %s: %w", u, err)
		}
		return nil
	}
	if err := ensureUser("root"); err != nil {
		return err
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("grant root: %w", err)
	}
	names := make([]string, 0, len(acc.Roles))
	for r := range acc.Roles {
		names = append(names, r)
	}
	slices.Sort(names)
	for _, r := range names {
		if got, err := cli.RoleGet(ctx, r); err != nil {
			if _, err := cli.RoleAdd(ctx, r); err != nil {
				return fmt.Errorf("role add %s: %w", r, err)
			}
		} else {
			for _, p := range got.Perm {
				if _, err := cli.RoleRevokePermission(ctx, r, string(p.Key), string(p.RangeEnd)); err != nil {
					return fmt.Errorf("role %s revoke %q: %w", r, p.Key, err)
				}
			}
		}
		for _, p := range acc.Roles[r] {
			end := ""
			if p.Prefix {
				end = clientv3.GetPrefixRangeEnd(p.Key)
			}
			typ := clientv3.PermissionType(authpb.READ)
			switch {
			case p.Read && p.Write:
				typ = clientv3.PermissionType(authpb.READWRITE)
			case p.Write:
				typ = clientv3.PermissionType(authpb.WRITE)
			}
			if _, err := cli.RoleGrantPermission(ctx, r, p.Key, end, typ); err != nil {
				return fmt.Errorf("role %s grant %q: %w", r, p.Key, err)
			}
		}
	}
	for _, u := range acc.Order {
		if err := ensureUser(u); err != nil {
			return err
		}
		for _, r := range acc.Users[u] {
			if _, err := cli.UserGrantRole(ctx, u, r); err != nil {
				return fmt.Errorf("grant %s to %s: %w", r, u, err)
			}
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("auth enable: %w", err)
	}
	log.Info("etcd access applied", "roles", len(acc.Roles), "users", len(acc.Users))
	return nil
}

func runSecrets(args []string) error {
	fl := flag.NewFlagSet("secrets", flag.ExitOnError)
	path := fl.String("env-file", ".env", "env file to create")
	names := fl.String("names", "SLUICE_PROXY_ADMIN_TOKEN,SLUICE_SCHEDULER_API_TOKEN,SLUICE_AGENT_ADMIN_TOKEN", "variables to fill with random tokens")
	extra := fl.String("extra", "", "NAME=VALUE pairs (comma-separated) written as they are")
	_ = fl.Parse(args)
	if _, err := os.Stat(*path); err == nil {
		fmt.Printf("%s exists; kept\n", *path)
		return nil
	}
	var b strings.Builder
	b.WriteString("# Generated by deploy-init secrets; keep private. Delete to regenerate.\n")
	for _, kv := range splitList(*extra) {
		fmt.Fprintf(&b, "%s\n", kv)
	}
	for _, n := range splitList(*names) {
		buf := make([]byte, 24)
		if _, err := rand.Read(buf); err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s=%s\n", n, hex.EncodeToString(buf))
	}
	if err := os.WriteFile(*path, []byte(b.String()), 0o600); err != nil {
		return err
	}
	fmt.Printf("%s written\n", *path)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
