// Package fence helps a protected resource enforce fencing tokens and tell
// leasewatch what it did with each write.
//
// A lock is only a hint unless the resource it protects checks the holder's
// fencing token: a holder that paused past its lease still believes it holds
// the lock, and its late write lands unless the resource remembers the highest
// token it has accepted and refuses anything lower. leasewatch records those
// outcomes next to the lock's grants, so it can show whether the fencing held.
//
// The package imports only the standard library.
//
// # Fenced SQL writes
//
// Store the highest accepted token beside the data, compare it in the UPDATE's
// WHERE clause and set it to the caller's token in the same statement:
//
//	UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?
//
// [Exec] runs such a statement and reads zero rows affected as [Rejected]: the
// row has already seen a newer token. Comparing and setting in one statement
// matters; a SELECT followed by an UPDATE lets a newer holder's write slip in
// between. The comparison is <= (accept an equal token) so one holder can write
// repeatedly during its tenure; use < if each grant may write only once. The
// fence column should be NOT NULL DEFAULT 0: a NULL fence never compares true,
// so every write would be rejected. A missing row also affects zero rows, so
// create rows before fencing updates to them (or use a fence table, below).
//
// MySQL reports changed rows rather than matched rows by default, so a repeated
// write of identical values by the current holder would look rejected; connect
// with clientFoundRows=true.
//
// # Per-lock fence table
//
// When the protected data has no room for a fence column, or one lock guards
// many rows or tables, keep the fence in a table of its own and advance it in
// the same transaction as the data write:
//
//	CREATE TABLE fences (lock TEXT PRIMARY KEY, token INTEGER NOT NULL);
//
//	INSERT INTO fences (lock, token) VALUES (?, ?)
//	  ON CONFLICT (lock) DO UPDATE SET token = excluded.token
//	  WHERE fences.token <= excluded.token
//
// The upsert affects no row when the stored token is newer, so [Exec] reports
// [Rejected] and the caller rolls the transaction back; on [Accepted] it makes
// the data write and commits. The row lock the upsert takes holds off a
// concurrent writer until the transaction ends. This syntax works in SQLite
// and PostgreSQL (with $n placeholders).
//
// Tokens are comparable only within one lock of one source: an etcd
// CreateRevision means nothing next to a Kubernetes leaseTransitions count.
// Key fences by everything that names the lock.
//
// # Resources without SQL
//
// [Guard] keeps the highest token per lock in memory, for a resource that is a
// single process. It forgets everything on restart, so a restarted resource
// accepts the first token it sees; persist the fence where that matters.
//
// # Reporting outcomes
//
// A [Reporter] sends every outcome to leasewatch's POST /api/v1/writes in
// batches from a background goroutine. [Reporter.Report] never blocks the
// write path: when leasewatch is slow or down, writes wait in a bounded queue,
// and when the queue is full further writes are dropped and counted in
// [Stats]. Failed requests are retried with the same request IDs, so
// leasewatch stores each write once however often it was sent. A request ID
// is unique per source, lock and resource: leasewatch stores the same ID
// from another resource or for another lock as another write, and refuses
// with 409 a report that reuses an ID of its own resource and lock for a
// different write (the Reporter drops and counts such a batch as refused).
//
// A Reporter's writes are of Config.Source unless a [Write] names another.
// Each request carries writes of one source, in the order they were
// reported: with replicas, only the owner of a source stores its writes,
// and a replica answers a request naming a source it does not own with 503,
// Retry-After and Connection: close. The Reporter retries it on a new
// connection, which a load balancer may send to the owner.
//
//	r, err := fence.NewReporter(fence.Config{
//		URL:      "http://127.0.0.1:8080",
//		Token:    os.Getenv("LEASEWATCH_INGEST_TOKEN"),
//		Source:   "prod-etcd",
//		Resource: "accounts-db",
//	})
//	...
//	defer r.Close(ctx)
//
//	outcome, err := fence.Exec(ctx, db,
//		`UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?`,
//		balance, token, id, token)
//	if err != nil {
//		return err
//	}
//	r.Report(fence.Write{Lock: "/locks/accounts", Token: &token, Outcome: outcome, Holder: me})
package fence
