// Command kube-apiserver is a real kube-apiserver built from the Kubernetes
// Go module, for leasewatch's Kubernetes collector tests. It lives in its own
// module so the main module never depends on k8s.io/kubernetes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
