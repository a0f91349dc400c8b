package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// readPool is the query_only pool. Its QueryContext and QueryRowContext
// prepare each query text once and keep the statement: parsing and planning
// cost more than running most of the store's reads, and an incident review
// runs hundreds of them. Transactions (BeginTx) run their queries unprepared:
// preparing needs a connection of its own, which a transaction holding the
// last free one would wait for forever. A query whose text varies with its
// arguments (an IN list) goes to DB directly, so as not to fill the cache.
type readPool struct {
	*sql.DB

	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// maxReadStmts caps the statements kept; further query texts run
// unprepared. The store's queries differ only in which filters are set, so
// normal use needs a few dozen.
const maxReadStmts = 256

func newReadPool(db *sql.DB) *readPool {
	return &readPool{DB: db, stmts: make(map[string]*sql.Stmt)}
}

// stmt returns the kept statement for query, preparing it on first use, or
// nil when maxReadStmts are kept already.
func (p *readPool) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	p.mu.Lock()
	st, ok := p.stmts[query]
	full := len(p.stmts) >= maxReadStmts
	p.mu.Unlock()
	if ok || full {
		return st, nil
	}
	st, err := p.DB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if kept, ok := p.stmts[query]; ok { // prepared meanwhile by another reader
		st.Close()
		return kept, nil
	}
	p.stmts[query] = st
	return st, nil
}

// QueryContext runs query with its kept statement.
func (p *readPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return p.DB.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext runs query with its kept statement.
func (p *readPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := p.stmt(ctx, query)
	if err != nil || st == nil {
		// Unprepared, a query that cannot be prepared reports why through
		// the Row, as database/sql does.
		return p.DB.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// Close closes the kept statements and the pool.
func (p *readPool) Close() error {
	p.mu.Lock()
	for _, st := range p.stmts {
		st.Close()
	}
	clear(p.stmts)
	p.mu.Unlock()
	return p.DB.Close()
}
