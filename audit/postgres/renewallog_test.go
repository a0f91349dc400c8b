package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// rebucketAll folds every synced commit row into bucket rows, in one
// transaction (storetest.Harness.Rebucket).
func rebucketAll(t *testing.T, s storetest.Store) {
	t.Helper()
	ctx := context.Background()
	tried := false
	err := pgx.BeginFunc(ctx, s.(*Store).writer, func(tx pgx.Tx) (err error) {
		_, tried, err = foldLog(ctx, tx, renewallog.Fold{Rows: 1, Renewals: 1 << 30})
		return err
	})
	if err != nil || !tried {
		t.Fatalf("rebucket: %v (retention lock taken: %v)", err, tried)
	}
}

// The writer writes commit rows, and folds them into bucket rows in the
// batch that finds renewallog.WriterFold's worth written since it last
// looked and synced: never unsynced ones.
func TestWriterRebucketsSyncedCommitRows(t *testing.T) {
	s, _ := open(t)
	storetest.WriterFoldsSyncedCommitRows(t, s, renewallog.WriterFold.Rows, func() (commit, bucket int) {
		if err := s.reader.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE bucket = $1),
			count(*) FILTER (WHERE bucket <> $1) FROM renewal_log`, runcodec.CommitBucket).Scan(&commit, &bucket); err != nil {
			t.Fatal(err)
		}
		return commit, bucket
	})
}
