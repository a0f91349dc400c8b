package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// readPool is the query_only pool. Its QueryContext and QueryRowContext
// prepare each query text once and keep the statement: parsing and planning
// cost more than running most of the store's reads, and an incident review
// runs hundreds of them. Transactions (readTx) use the kept statements but
// never prepare one while they hold their connection: preparing needs a
// connection of its own, which a transaction holding the last free one
// would wait for forever. A query whose text varies with its arguments (an
// IN list) goes to DB directly, so as not to fill the cache.
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

// kept returns the kept statement for query, nil if there is none.
func (p *readPool) kept(query string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stmts[query]
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

// readTx is a read-only transaction of the pool. It runs a query with the
// pool's kept statement, which Tx.StmtContext prepares on the
// transaction's own connection once and keeps there; a query without one
// runs unprepared, and is prepared for the pool once the transaction has
// ended and given its connection back.
type readTx struct {
	tx    *sql.Tx
	pool  *readPool
	mu    sync.Mutex
	later []string
}

func (t *readTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.pool.kept(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	t.prepareLater(query)
	return t.tx.QueryContext(ctx, query, args...)
}

func (t *readTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.pool.kept(query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	t.prepareLater(query)
	return t.tx.QueryRowContext(ctx, query, args...)
}

func (t *readTx) prepareLater(query string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.later = append(t.later, query)
}

// end rolls the transaction back, then prepares the queries it ran
// unprepared. A query that cannot be prepared failed in the transaction
// already, so its error here says nothing new.
func (t *readTx) end(ctx context.Context) {
	t.tx.Rollback()
	for _, query := range t.later {
		_, _ = t.pool.stmt(ctx, query)
	}
}
