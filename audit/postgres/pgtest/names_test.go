package pgtest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNewestDebian(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "15", "16", "17"} {
		bin := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		// 17 has only client tools, as with postgresql-client-17 alone.
		if v != "17" {
			if err := os.WriteFile(filepath.Join(bin, "postgres"), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := newestDebian(root), filepath.Join(root, "16", "bin"); got != want {
		t.Errorf("newestDebian = %s, want %s", got, want)
	}
	if got := newestDebian(t.TempDir()); got != "" {
		t.Errorf("newestDebian of an empty root = %q, want none", got)
	}
}

func TestDatabaseName(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		n      int
		want   string
	}{
		{"TestStore/PausedHolderWriteRejected", 3, "teststore_pausedholderwriterejected_3"},
		{"", 1, "db__1"},
		{"9lives", 2, "db_9lives_2"},
		{"Test\"; DROP DATABASE postgres; --", 4, "test___drop_database_postgres_____4"},
		{"TestAVeryLongNameThatGoesOnAndOnPastTheLimitOfIdentifiers/AndSubtest", 12345, "testaverylongnamethatgoesonandonpastthelimitofid_12345"},
	} {
		if got := databaseName(tc.prefix, tc.n); got != tc.want {
			t.Errorf("databaseName(%q, %d) = %q, want %q", tc.prefix, tc.n, got, tc.want)
		}
		if got := databaseName(tc.prefix, tc.n); len(got) > 63 {
			t.Errorf("databaseName(%q, %d) = %q: %d bytes, PostgreSQL keeps 63", tc.prefix, tc.n, got, len(got))
		}
	}
}
