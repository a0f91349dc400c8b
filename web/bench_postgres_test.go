package web

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit/postgres"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/audit/sqlite/synth"
)

// BenchmarkPagesPostgres serves BenchmarkPages' pages from the same
// generated database (synth.Default) in PostgreSQL and, page by page in the
// same run, from SQLite: sub-benchmarks PAGE/postgres and PAGE/sqlite. The
// PostgreSQL database is generated through the store's own Apply into a
// server kept under .cache/bench/postgres/ (tens of minutes the first time)
// and reused until the generator changes; the server runs with
// PostgreSQL's default settings (shared_buffers 128 MB) on the benchmark's
// cores. Run with: go test -run '^$' -bench PagesPostgres -benchtime 60x -timeout 90m ./web/
func BenchmarkPagesPostgres(b *testing.B) {
	spec := synth.Default()
	lite, liteStore, sum := benchServer(b, spec)
	pgStore := benchPostgres(b, spec)
	pg := benchHandler(b, pgStore, sum.Sources, spec.End)
	pgPages := defaultPages(b, pgStore, sum, spec)
	for i, p := range defaultPages(b, liteStore, sum, spec) {
		benchPage(b, pg, p.name+"/postgres", pgPages[i].url)
		benchPage(b, lite, p.name+"/sqlite", p.url)
	}
}

// benchPostgres returns a store on spec's generated database in a
// PostgreSQL server kept under .cache/bench/postgres/, generating it first
// if no earlier run finished it. The server stops at the benchmark's end.
func benchPostgres(b *testing.B, spec synth.Spec) *postgres.Store {
	b.Helper()
	ctx := context.Background()
	root, err := repoRoot()
	if err != nil {
		b.Fatal(err)
	}
	cache := filepath.Join(root, ".cache", "bench")
	srv := pgtest.New(b, pgtest.Options{Dir: filepath.Join(cache, "postgres"), NoFsync: true})
	key, err := synth.Key(spec)
	if err != nil {
		b.Fatal(err)
	}
	name := "synth_" + key[len("synth-"):]
	done := filepath.Join(cache, key+".postgres.json")
	if _, err := os.Stat(done); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			b.Fatal(err)
		}
		generatePostgres(b, srv, name, spec)
		b.Logf("generated %s into PostgreSQL", key)
		if err := os.WriteFile(done, []byte(`{"database":"`+name+`"}`), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	store, err := postgres.Open(ctx, srv.URL(name), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return store
}

// generatePostgres (re)creates database name on srv with spec's audit log,
// then vacuums and analyzes it, as autovacuum would after a load, so that
// the planner has statistics and index-only scans a visibility map.
func generatePostgres(b *testing.B, srv *pgtest.Server, name string, spec synth.Spec) {
	b.Helper()
	ctx := context.Background()
	if err := srv.DropDatabase(ctx, name); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	store, err := postgres.Open(ctx, srv.URL(name), postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	start := time.Now()
	sum, err := synth.Generate(ctx, store, spec)
	if err != nil {
		b.Fatalf("generate into PostgreSQL: %v", err)
	}
	js, _ := json.Marshal(sum)
	b.Logf("generated in %s: %s", time.Since(start).Round(time.Second), js)
	db, err := pgx.Connect(ctx, srv.URL(name))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, "VACUUM (ANALYZE)"); err != nil {
		b.Fatal(err)
	}
}
