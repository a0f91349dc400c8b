package sqlite

import (
	"context"
	"database/sql"
	"testing"

	"github.com/leasewatch/leasewatch/audit/internal/renewallog"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// rebucketAll folds every synced commit row into bucket rows, in one
// transaction (storetest.Harness.Rebucket).
func rebucketAll(t *testing.T, s storetest.Store) {
	t.Helper()
	err := s.(*Store).writeTx(context.Background(), func(tx *sql.Tx) error {
		_, _, err := renewallog.Rebucket(context.Background(), newLogTx(tx), logSQL, renewallog.Fold{Rows: 1, Renewals: 1 << 30})
		return err
	}, nil)
	if err != nil {
		t.Fatalf("rebucket: %v", err)
	}
}

// logRows counts the renewal log's commit rows and bucket rows.
func logRows(t *testing.T, s *Store) (commit, bucket int) {
	t.Helper()
	if err := s.writer.QueryRow(`SELECT count(*) FILTER (WHERE bucket = ?), count(*) FILTER (WHERE bucket <> ?) FROM renewal_log`,
		runcodec.CommitBucket, runcodec.CommitBucket).Scan(&commit, &bucket); err != nil {
		t.Fatal(err)
	}
	return commit, bucket
}

// The writer writes commit rows, and folds them into bucket rows in the
// commit that finds renewallog.WriterFold's worth synced: never unsynced
// ones.
func TestWriterRebucketsSyncedCommitRows(t *testing.T) {
	s, _ := openStore(t)
	storetest.WriterFoldsSyncedCommitRows(t, s, renewallog.WriterFold.Rows, func() (int, int) { return logRows(t, s) })
}
