package main

import (
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/leasewatch/leasewatch/collectors/zookeeper/zkserver"
)

// A short ZooKeeper load against a real leasewatch process and Debian's
// ZooKeeper server: every grant and release the clients of the documented
// lock recipe logged is stored once, with the czxid they held as its
// token, and no end is taken for an expiry.
func TestZooKeeperLoadRecordsEveryHandoverOnce(t *testing.T) {
	ctx, log, bin := startLoadTest(t)
	var k zkLoad
	fs := flag.NewFlagSet("zookeeper", flag.ContinueOnError)
	k.flags(fs)
	// Small, and with a lag bound that a race-detector build on a busy
	// machine meets: the load tool measures the real target at full size.
	if err := fs.Parse([]string{"--locks", "40", "--sessions", "4", "--hold", "1s", "--warmup", "1s", "--duration", "6s",
		"--lag-target", "5s", "--leasewatch", bin}); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	err := k.run(ctx, &out, log)
	if errors.Is(err, zkserver.ErrMissing) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	t.Logf("load:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\| releases made / recorded \| [1-9][0-9]* / `).MatchString(out.String()) {
		t.Error("no lock changed hands during the load")
	}
	for _, row := range []string{"| grants made / recorded |", "| tenures recorded with the client's token (czxid) |", "| handover lag p99"} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("the run's table lacks its %q row", row)
		}
	}
	if strings.Contains(log.String(), "DATA RACE") {
		t.Error("leasewatch reported a data race")
	}
}
