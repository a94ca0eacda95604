// Command etcd is etcd v3.5 (server/v3/etcdmain) built from the Go module for Stampede's test cluster.
// `go install go.etcd.io/etcd/server/v3@...` cannot be used: etcd's go.mod has replace directives.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
