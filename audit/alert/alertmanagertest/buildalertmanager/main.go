// Command buildalertmanager builds the test Alertmanager into the cache if it
// is missing, so `make test` pays for the build once, before the tests.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/leasewatch/leasewatch/audit/alert/alertmanagertest"
)

func main() {
	bin, err := alertmanagertest.Binary(context.Background(), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
