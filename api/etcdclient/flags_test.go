package etcdclient

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// parse runs an app holding Flags(def) with args and returns what
// FromFlags and --prefix read.
func parse(t *testing.T, def string, args ...string) (Config, string) {
	t.Helper()
	var got Config
	var prefix string
	app := &cli.App{Name: "x", Flags: Flags(def), Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{},
		Action: func(c *cli.Context) error {
			got, prefix = FromFlags(c), c.String(FlagPrefix)
			return nil
		}}
	if err := app.Run(append([]string{"x"}, args...)); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return got, prefix
}

func TestFlagsDefaults(t *testing.T) {
	got, prefix := parse(t, "")
	if want := (Config{DialTimeout: DefaultDialTimeout}); !reflect.DeepEqual(got, want) || prefix != "/sluice" {
		t.Fatalf("got %+v prefix %q, want %+v prefix /sluice", got, prefix, want)
	}
	got, _ = parse(t, "127.0.0.1:2379")
	if !reflect.DeepEqual(got.Endpoints, []string{"127.0.0.1:2379"}) {
		t.Fatalf("default endpoints: %q", got.Endpoints)
	}
}

func TestFlagsCanonicalAndAliases(t *testing.T) {
	want := Config{Endpoints: []string{"a:1", "b:2", "c:3"}, Username: "u", Password: "p",
		CACert: "ca.pem", Cert: "c.pem", Key: "k.pem", DialTimeout: 7 * time.Second}
	for _, args := range [][]string{
		{"--etcd-endpoints", "a:1, b:2", "--etcd-endpoints", "c:3", "--etcd-user", "u", "--etcd-password", "p",
			"--etcd-cacert", "ca.pem", "--etcd-cert", "c.pem", "--etcd-key", "k.pem", "--etcd-dial-timeout", "7s", "--prefix", "/q"},
		// the daemons' old names
		{"--etcd", "a:1,b:2,c:3", "--etcd-user", "u", "--etcd-password", "p",
			"--etcd-cacert", "ca.pem", "--etcd-cert", "c.pem", "--etcd-key", "k.pem", "--etcd-dial-timeout", "7s", "--prefix", "/q"},
		// lbctl's old names
		{"--endpoints", "a:1,b:2,c:3", "--user", "u", "--password", "p",
			"--cacert", "ca.pem", "--cert", "c.pem", "--key", "k.pem", "--etcd-dial-timeout", "7s", "--prefix", "/q"},
	} {
		got, prefix := parse(t, "127.0.0.1:2379", args...)
		if !reflect.DeepEqual(got, want) || prefix != "/q" {
			t.Errorf("%q:\n got %+v prefix %q\nwant %+v prefix /q", args, got, prefix, want)
		}
	}
}

func TestFlagsEnv(t *testing.T) {
	for _, name := range []string{"SLUICE_ETCD_ENDPOINTS", "SLUICE_ETCD", "SLUICE_ENDPOINTS"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, "e1:1,e2:2")
			t.Setenv("SLUICE_ETCD_USER", "eu")
			t.Setenv("SLUICE_ETCD_PASSWORD", "ep")
			t.Setenv("SLUICE_ETCD_CACERT", "eca")
			t.Setenv("SLUICE_ETCD_CERT", "ec")
			t.Setenv("SLUICE_ETCD_KEY", "ek")
			t.Setenv("SLUICE_ETCD_DIAL_TIMEOUT", "2s")
			t.Setenv("SLUICE_PREFIX", "/env")
			got, prefix := parse(t, "127.0.0.1:2379")
			want := Config{Endpoints: []string{"e1:1", "e2:2"}, Username: "eu", Password: "ep",
				CACert: "eca", Cert: "ec", Key: "ek", DialTimeout: 2 * time.Second}
			if !reflect.DeepEqual(got, want) || prefix != "/env" {
				t.Fatalf("got %+v prefix %q\nwant %+v prefix /env", got, prefix, want)
			}
			// a flag beats its variable
			got, _ = parse(t, "", "--etcd-endpoints", "f:1")
			if !reflect.DeepEqual(got.Endpoints, []string{"f:1"}) {
				t.Fatalf("flag over env: %q", got.Endpoints)
			}
		})
	}
}

func TestFlagsHelp(t *testing.T) {
	var out bytes.Buffer
	app := &cli.App{Name: "x", Flags: Flags(""), Writer: &out, Action: func(*cli.Context) error { return nil }}
	if err := app.Run([]string{"x", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--etcd-endpoints value, --etcd value, --endpoints value", "$SLUICE_ETCD_ENDPOINTS",
		"--etcd-dial-timeout", "$SLUICE_ETCD_DIAL_TIMEOUT", "--etcd-user value, --user value", "--prefix"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help lacks %q:\n%s", s, out.String())
		}
	}
}
