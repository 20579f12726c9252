// Command etcd is etcd's own server binary built from the etcd module pinned
// in integration/go.mod, so the deployment's etcd version is the one every
// test runs against. It accepts exactly etcd's flags and environment
// (ETCD_*); deploy/images builds it into the sluice/etcd image.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
