// Package migrations holds leasewatch's schema as numbered SQL files, one set
// per database engine: sqlite/ for audit/sqlite, postgres/ for
// audit/postgres.
//
// Files are named NNNN_description.sql and applied in version order, each in
// its own transaction, by the store of their engine, which records every
// applied version in schema_migrations. The sets are numbered apart: a
// version means a file of its own engine's set only. They are append-only: a
// file is never edited once it has landed; change the schema by adding the
// next number to each engine's set.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// The migration sets, each with its files at its root, for Load.
var (
	SQLite   = sub("sqlite")
	Postgres = sub("postgres")
)

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // dir is one of the embedded directories
	}
	return f
}
