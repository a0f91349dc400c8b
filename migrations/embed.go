// Package migrations holds leasewatch's SQLite schema as numbered SQL files.
//
// Files are named NNNN_description.sql and applied in version order, each in
// its own transaction, by the store (audit/sqlite), which records every applied
// version in schema_migrations. They are append-only: a file is never edited
// once it has landed; change the schema by adding the next number.
package migrations

import "embed"

// FS holds the migration files at its root.
//
//go:embed *.sql
var FS embed.FS
