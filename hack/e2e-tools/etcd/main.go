// Command etcd is etcd's own server main, built from go.etcd.io/etcd/server/v3 so the e2e
// tools module pins one etcd version next to the Kubernetes binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
