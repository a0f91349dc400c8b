// Command buildpromtool builds promtool into the cache if it is missing, so
// `make test` pays for the build once, before the tests.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/leasewatch/leasewatch/deploy/prometheus/promtooltest"
)

func main() {
	bin, err := promtooltest.Binary(context.Background(), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
