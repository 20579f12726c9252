// Command lbctl is the Sluice operator tool. See `lbctl --help` and docs/lbctl.md.
package main

import (
	"os"

	"github.com/sluicelb/sluice/cli/lbctl"
)

func main() {
	os.Exit(lbctl.Main(os.Args, os.Stdout, os.Stderr, os.Stdin))
}
