package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestReadPoolKeepsOneStatementPerQuery(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	for range 3 {
		if _, err := s.LockCounts(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.reader.stmts); n != 1 {
		t.Fatalf("kept %d statements after one query ran three times, want 1", n)
	}

	// Past the cap, queries still run, unprepared.
	for i := range maxReadStmts + 5 {
		var got int
		if err := s.reader.QueryRowContext(ctx, fmt.Sprintf("SELECT %d", i)).Scan(&got); err != nil || got != i {
			t.Fatalf("SELECT %d = %d, %v", i, got, err)
		}
	}
	if n := len(s.reader.stmts); n != maxReadStmts {
		t.Errorf("kept %d statements, want the cap, %d", n, maxReadStmts)
	}
}

func TestReadPoolReportsQueriesThatDoNotPrepare(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	var v int
	if err := s.reader.QueryRowContext(ctx, "SELECT n FROM nowhere").Scan(&v); err == nil || !strings.Contains(err.Error(), "no such table") {
		t.Errorf("QueryRowContext on a missing table: err = %v, want no such table", err)
	}
	if _, err := s.reader.QueryContext(ctx, "SELECT n FROM nowhere"); err == nil || !strings.Contains(err.Error(), "no such table") {
		t.Errorf("QueryContext on a missing table: err = %v, want no such table", err)
	}
	if n := len(s.reader.stmts); n != 0 {
		t.Errorf("kept %d statements, want none", n)
	}
}
