package pgtest_test

import (
	"strconv"
	"testing"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// TestStandbyFailover makes a synchronous standby of a server of its own,
// kills the primary and promotes the standby: every row committed on the
// primary is on the standby, and the failover URL reaches it for writes.
// Then the old primary follows the new one and the two fail back.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	primary := pgtest.New(t, pgtest.Options{})
	url := primary.Database(t)
	standby := pgtest.NewStandby(t, primary, pgtest.Options{})
	if err := primary.RequireSynchronousStandby(ctx(t)); err != nil {
		t.Fatal(err)
	}
	failover, err := pgtest.FailoverURL(url, standby)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, failover)
	exec(t, conn, "CREATE TABLE leases (token bigint PRIMARY KEY, holder text NOT NULL)")
	exec(t, conn, "INSERT INTO leases VALUES (41, 'worker-1')")
	if got := show(t, conn, "port"); got != strconv.Itoa(primary.Port) {
		t.Fatalf("the failover URL reached port %s before the failover, want the primary's %s", got, strconv.Itoa(primary.Port))
	}

	primary.Kill()
	if err := standby.Promote(ctx(t)); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, failover)
	if got := show(t, conn, "port"); got != strconv.Itoa(standby.Port) {
		t.Fatalf("the failover URL reached port %s after the failover, want the standby's %s", got, strconv.Itoa(standby.Port))
	}
	exec(t, conn, "INSERT INTO leases VALUES (42, 'worker-2')")
	if got := holders(t, conn); got != "41:worker-1 42:worker-2" {
		t.Errorf("rows on the promoted standby = %q, want 41:worker-1 42:worker-2", got)
	}

	if err := primary.Follow(ctx(t), standby); err != nil {
		t.Fatal(err)
	}
	if err := standby.RequireSynchronousStandby(ctx(t)); err != nil {
		t.Fatal(err)
	}
	exec(t, conn, "INSERT INTO leases VALUES (43, 'worker-3')")
	standby.Kill()
	if err := primary.Promote(ctx(t)); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, failover)
	if got := show(t, conn, "port"); got != strconv.Itoa(primary.Port) {
		t.Fatalf("the failover URL reached port %s after failing back, want the first primary's %d", got, primary.Port)
	}
	if got := holders(t, conn); got != "41:worker-1 42:worker-2 43:worker-3" {
		t.Errorf("rows after failing back = %q, want 41:worker-1 42:worker-2 43:worker-3", got)
	}
}
