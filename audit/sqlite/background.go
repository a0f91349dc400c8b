package sqlite

import (
	"database/sql"
	"fmt"

	"github.com/leasewatch/leasewatch/audit"
)

// background is the store with its reads through the background
// connection (Background).
type background struct {
	*Store
	reads
}

var _ audit.Store = (*background)(nil)

// backgroundCache is the page cache of the background connection, in KiB.
const backgroundCache = 2048

// openBackground opens the pool of Background's one connection. Like any
// database/sql pool it connects at its first read.
func (s *Store) openBackground() error {
	db, err := sql.Open("sqlite", dsn(s.path, "_pragma=query_only(1)", "_pragma=mmap_size(0)",
		fmt.Sprintf("_pragma=cache_size(-%d)", backgroundCache)))
	if err != nil {
		return fmt.Errorf("open background read pool: %w", err)
	}
	keepConns(db, 1)
	s.bgPool = newReadPool(db)
	s.bg = background{Store: s, reads: reads{Engine: engine(s.bgPool)}}
	return nil
}

// Background returns the store with its reads through a connection of
// their own, for work done in the background over every lock (the verdict
// keeper's sweeps of their histories, a scrape's count of their verdicts).
// It neither waits for the dashboard's read connections nor holds them, so
// that pages are read ahead of it. And it reads the file as ordinary reads
// through the kernel's file cache into a small page cache of its own
// (backgroundCache), without mapping it: a sweep of 100,000 locks'
// histories would otherwise count most of the database's pages in the
// process's resident memory, and a count that joins every lock's row would
// count the whole locks table. Its reads are one at a time.
func (s *Store) Background() audit.Store { return &s.bg }
