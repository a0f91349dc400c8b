package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leasewatch/leasewatch/audit"
)

// Streaming lease tables. A table the server can publish is followed
// through logical replication: a publication on the configured tables, a
// permanent slot of pgoutput (protocol 1, so that a transaction arrives
// whole, at its commit), named for the source. The first start creates the
// slot and reads the tables in the slot's own snapshot, so that the stream
// goes on exactly where the read ended. Each committed transaction becomes
// one StreamBatch, whose Cursor the caller stores with its observations and
// whose Position it confirms (Confirm) only once they are durable: the slot
// keeps the WAL from the last confirmed position, and a Start from the
// stored cursor skips what the server sends again of it. So a restart or a
// takeover neither loses nor repeats a change.
//
// A grant's token is the commit LSN of its transaction, which one server
// assigns in commit order, so it only grows there. A restore from a backup
// or a failover to a standby brings another timeline whose LSNs can repeat
// earlier ones, and the slot does not survive either (PostgreSQL 15 does
// not copy slots to a standby): the source needs a new cursor, and the
// tokens after it may be lower than before it.

// StreamConfig is what a stream follows.
type StreamConfig struct {
	// URL is the database's connection URL, as a role with the REPLICATION
	// attribute and SELECT on the tables (and, to create the publication,
	// their owner; an operator can create it instead).
	URL string
	// Source is the source's name; the slot and the publication are named
	// for it (SlotName).
	Source string
	// Tables are the lease tables to follow; none may be UNLOGGED.
	Tables []TableMapping
	// Fences are the fenced tables to follow (fence.go): each row written
	// is a write its resource accepted. None may be UNLOGGED.
	Fences []FenceMapping
	// ConnConfig, when set, is used instead of URL (the collector's, with
	// the source's password and TLS).
	ConnConfig *pgx.ConnConfig
	// Heartbeats asks the server for a keepalive with every status update,
	// and makes Next return each one that finds the stream caught up as an
	// empty batch at the same Position: the server's word that nothing
	// changed up to its time, which lets the caller vouch for it.
	Heartbeats bool
	// StatusInterval is how often the stream tells the server where it is;
	// zero: 10 s, under the server's wal_sender_timeout of 60 s.
	StatusInterval time.Duration
}

// StreamBatch is one committed transaction's observations, or, with none,
// the server's word that nothing changed up to Position.
type StreamBatch struct {
	Observations []audit.Observation
	// Writes are the rows the transaction wrote to fenced tables, each a
	// write its resource accepted, with no Source: the caller's to set.
	Writes []audit.WriteReport
	// At is the commit time (or the server's time, idle) on the database's
	// clock: every change committed before it has been delivered.
	At time.Time
	// Position is where the stream is after the batch: Confirm it once the
	// batch is durable.
	Position LSN
	// Moved says the batch moves the stream to Position: store the
	// stream's Cursor with it (read before the next call of Next), and
	// Confirm Position once it is durable. A heartbeat at the position the
	// stream was at does not move it.
	Moved bool
	// Snapshot says this is the initial read: every row held then.
	Snapshot bool
}

// Stream follows lease tables through one replication slot. Its methods
// are not safe for concurrent use.
type Stream struct {
	cfg       StreamConfig
	name      string
	tables    map[uint32]*Rows // by relation OID
	fences    map[uint32]FenceMapping
	relations map[uint32]*pglogrepl.RelationMessage
	types     *pgtype.Map
	repl      *pgconn.PgConn
	from      LSN // a transaction committed before it was delivered before the restart
	confirmed LSN
	statusDue time.Time
	tx        *streamTx // the transaction being received
}

// streamTx is a transaction being received: its commit LSN and time, and
// what its changes showed.
type streamTx struct {
	lsn    LSN
	at     time.Time
	obs    []audit.Observation
	writes []audit.WriteReport
}

// SlotName is the name of the slot and the publication of source:
// leasewatch_, the source's name in lower case with other characters than
// letters, digits and _ replaced, and a hash of the name, which keeps
// sources apart whose names differ only there. pglogrepl does not quote a
// slot's name, so it is kept to [a-z0-9_].
func SlotName(source string) string {
	h := fnv.New32a()
	h.Write([]byte(source))
	clean := nonSlot.ReplaceAllString(strings.ToLower(source), "_")
	if len(clean) > 40 {
		clean = clean[:40]
	}
	return fmt.Sprintf("leasewatch_%s_%08x", clean, h.Sum32())
}

var nonSlot = regexp.MustCompile(`[^a-z0-9_]`)

// NewStream returns a stream of cfg's tables, not yet started.
func NewStream(cfg StreamConfig) (*Stream, error) {
	if len(cfg.Tables) == 0 && len(cfg.Fences) == 0 {
		return nil, errors.New("tables: at least one table is required")
	}
	for i, m := range cfg.Tables {
		if err := m.Check(); err != nil {
			return nil, fmt.Errorf("tables[%d]: %w", i, err)
		}
	}
	for i, m := range cfg.Fences {
		if err := m.Check(); err != nil {
			return nil, fmt.Errorf("fences[%d]: %w", i, err)
		}
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	return &Stream{cfg: cfg, name: SlotName(cfg.Source), types: pgtype.NewMap(), relations: make(map[uint32]*pglogrepl.RelationMessage)}, nil
}

// cursor is what Stream.Cursor returns.
type cursor struct {
	LSN  string                 `json:"lsn"`
	Held map[string][]heldLease `json:"held,omitempty"` // by table
}

// Start connects, makes sure of the publication, and starts streaming:
// from the stored cursor, or, when it is empty, from a new slot, whose
// initial read it returns as a Snapshot batch (nil otherwise). After an
// error of Start or Next, Close the stream and Start a new one from the
// stored cursor.
func (s *Stream) Start(ctx context.Context, stored string) (*StreamBatch, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := s.resolve(ctx, conn); err != nil {
		return nil, err
	}
	if err := s.resolveFences(ctx, conn); err != nil {
		return nil, err
	}
	if err := s.publish(ctx, conn); err != nil {
		return nil, err
	}
	if s.repl, err = s.connectReplication(ctx); err != nil {
		return nil, err
	}
	var first *StreamBatch
	if stored == "" {
		first, err = s.createSlot(ctx, conn)
	} else {
		err = s.restore(stored)
	}
	if err == nil {
		err = pglogrepl.StartReplication(ctx, s.repl, s.name, pglogrepl.LSN(s.from), pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names '" + s.name + "'"},
		})
	}
	if err != nil {
		s.Close(ctx)
		if slotLost(err) {
			err = fmt.Errorf("%w: %w", ErrSlotLost, err)
		}
		return nil, fmt.Errorf("slot %s: %w", s.name, serverError(err))
	}
	s.confirmed, s.statusDue = s.from, time.Now().Add(s.cfg.StatusInterval)
	return first, nil
}

// ErrSlotLost says the stored cursor's slot is gone: dropped, or
// invalidated by max_slot_wal_keep_size after it fell too far behind. The
// changes since the cursor are lost: the caller records the time since as
// blind and starts again with no cursor, from a new slot and its snapshot.
var ErrSlotLost = errors.New("the replication slot is gone")

// slotLost reports whether err is the server saying the slot does not
// exist (undefined_object) or can no longer give changes
// (object_not_in_prerequisite_state).
func slotLost(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42704" || pgErr.Code == "55000")
}

// resolve finds each table's relation OID, which the stream's messages
// name it by.
func (s *Stream) resolve(ctx context.Context, conn *pgx.Conn) error {
	s.tables = make(map[uint32]*Rows, len(s.cfg.Tables))
	for _, m := range s.cfg.Tables {
		oid, err := relation(ctx, conn, m.Table)
		if err != nil {
			return err
		}
		if err := checkIdentity(ctx, conn, oid, m); err != nil {
			return err
		}
		rows, err := NewRows(m)
		if err != nil {
			return err
		}
		s.tables[oid] = rows
	}
	return nil
}

// relation returns the OID of the table named table.
func relation(ctx context.Context, conn *pgx.Conn, table string) (uint32, error) {
	var oid *uint32
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::oid", table).Scan(&oid); err != nil {
		return 0, fmt.Errorf("table %s: %w", table, err)
	}
	if oid == nil {
		return 0, fmt.Errorf("table %s: no such table", table)
	}
	return *oid, nil
}

// identityQuery reads a table's replica identity and the columns of the
// index it uses: the primary key by default, or the index set with ALTER
// TABLE ... REPLICA IDENTITY USING INDEX.
const identityQuery = `SELECT c.relreplident::text,
	coalesce(array_agg(a.attname::text ORDER BY a.attname) FILTER (WHERE a.attname IS NOT NULL), '{}')
FROM pg_class c
LEFT JOIN pg_index i ON i.indrelid = c.oid AND (c.relreplident = 'd' AND i.indisprimary OR c.relreplident = 'i' AND i.indisreplident)
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey)
WHERE c.oid = $1
GROUP BY c.relreplident`

// checkIdentity refuses a table whose changes would not say which row
// they are of. A DELETE carries only the replica identity's columns, so
// the mapping's key must be them, unless the identity is FULL. And a table
// with none must not be published at all: the server would then refuse the
// application's own UPDATEs and DELETEs of it ("cannot update table ...
// because it does not have a replica identity and publishes updates").
func checkIdentity(ctx context.Context, conn *pgx.Conn, oid uint32, m TableMapping) error {
	full, cols, err := replicaIdentity(ctx, conn, oid, m.Table)
	if err != nil || full {
		return err
	}
	key := slices.Sorted(slices.Values(m.key()))
	if !slices.Equal(key, cols) {
		return fmt.Errorf("key: %s's replica identity is (%s), not (%s): a deleted row would not say which it was", m.Table, strings.Join(cols, ", "), strings.Join(key, ", "))
	}
	return nil
}

// replicaIdentity returns whether the table's replica identity is FULL,
// and otherwise its columns; an error for a table with none.
func replicaIdentity(ctx context.Context, conn *pgx.Conn, oid uint32, table string) (full bool, cols []string, err error) {
	var ident string
	if err := conn.QueryRow(ctx, identityQuery, oid).Scan(&ident, &cols); err != nil {
		return false, nil, fmt.Errorf("table %s: replica identity: %w", table, err)
	}
	switch {
	case ident == "f":
		return true, nil, nil
	case len(cols) == 0:
		return false, nil, fmt.Errorf("table %s: has no primary key or replica identity; publishing it would make the application's UPDATE and DELETE fail: add a primary key, or set REPLICA IDENTITY", table)
	}
	return false, cols, nil
}

// publish creates the publication of the tables, or sets its tables. The
// server refuses an UNLOGGED table here, with its own words.
func (s *Stream) publish(ctx context.Context, conn *pgx.Conn) error {
	names := make([]string, 0, len(s.cfg.Tables)+len(s.cfg.Fences))
	for _, name := range s.published() {
		schema, table := schemaTable(name)
		id := pgx.Identifier{table}
		if schema != "" {
			id = pgx.Identifier{schema, table}
		}
		names = append(names, id.Sanitize())
	}
	var exists, same bool
	// A publication of exactly these tables is left as it is: an operator
	// may have created it, so that the source's role need not own them.
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1),
		coalesce((SELECT array_agg(pt.oid ORDER BY pt.oid) FROM pg_publication_tables p
			JOIN pg_class pt ON pt.relname = p.tablename JOIN pg_namespace n ON n.oid = pt.relnamespace AND n.nspname = p.schemaname
			WHERE p.pubname = $1) = (SELECT array_agg(o ORDER BY o) FROM unnest($2::oid[]) o), false)`,
		s.name, s.publishedOIDs()).Scan(&exists, &same)
	if err != nil {
		return fmt.Errorf("publication %s: %w", s.name, err)
	}
	if same {
		return nil
	}
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", s.name, strings.Join(names, ", "))
	if exists {
		sql = fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s", s.name, strings.Join(names, ", "))
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("publication %s: %w", s.name, serverError(err))
	}
	return nil
}

// published lists the names of the tables the publication holds: the
// lease tables', then the fenced tables'.
func (s *Stream) published() []string {
	var names []string
	for _, m := range s.cfg.Tables {
		names = append(names, m.Table)
	}
	for _, m := range s.cfg.Fences {
		names = append(names, m.Table)
	}
	return names
}

// publishedOIDs lists the OIDs of the tables the publication holds.
func (s *Stream) publishedOIDs() []uint32 {
	return slices.Sorted(func(yield func(uint32) bool) {
		for oid := range s.tables {
			yield(oid)
		}
		for oid := range s.fences {
			yield(oid)
		}
	})
}

// serverError adds the server's detail to its error, where it says why
// ("This operation is not supported for unlogged tables.").
func serverError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Detail != "" {
		return fmt.Errorf("%w: %s", err, pgErr.Detail)
	}
	return err
}

// connConfig is ConnConfig, or the URL's.
func (s *Stream) connConfig() (*pgx.ConnConfig, error) {
	if s.cfg.ConnConfig != nil {
		return s.cfg.ConnConfig.Copy(), nil
	}
	cc, err := pgx.ParseConfig(s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	return cc, nil
}

// connect opens a plain connection.
func (s *Stream) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := s.connConfig()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// connectReplication opens the replication connection, with the text
// forms of times fixed.
func (s *Stream) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cc, err := s.connConfig()
	if err != nil {
		return nil, err
	}
	cfg := &cc.Config
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["DateStyle"] = "ISO"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	return c, nil
}

// createSlot creates the slot, dropping one left by a run that stored no
// cursor (what it saw is lost: a new snapshot stands for it), and reads
// every table in the slot's snapshot.
func (s *Stream) createSlot(ctx context.Context, conn *pgx.Conn) (*StreamBatch, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)", s.name).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		if err := pglogrepl.DropReplicationSlot(ctx, s.repl, s.name, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
			return nil, fmt.Errorf("drop the slot left without a cursor: %w", err)
		}
	}
	slot, err := pglogrepl.CreateReplicationSlot(ctx, s.repl, s.name, "pgoutput", pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return nil, err
	}
	at, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		return nil, err
	}
	s.from = LSN(at)
	b, err := s.readSnapshot(ctx, conn, slot.SnapshotName)
	if err != nil {
		return nil, err
	}
	b.Position, b.Snapshot, b.Moved = s.from, true, true
	return b, nil
}

// readSnapshot reads every table in the exported snapshot, which lives
// until the replication connection's next command. A held row's token is
// the slot's consistent point: its grant's commit LSN is in no row, and
// every later grant's is higher.
func (s *Stream) readSnapshot(ctx context.Context, conn *pgx.Conn, snapshot string) (*StreamBatch, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshot+"'"); err != nil {
		return nil, fmt.Errorf("set the slot's snapshot: %w", err)
	}
	b := &StreamBatch{}
	if err := tx.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&b.At); err != nil {
		return nil, err
	}
	b.At = b.At.UTC()
	for _, oid := range sortedOIDs(s.tables) {
		rows := s.tables[oid]
		cols := rows.m.Columns()
		read, err := readRows(ctx, tx, rows, selectQuery(rows.m, cols), cols)
		if err != nil {
			return nil, err
		}
		for _, c := range diff(nil, read, b.At) {
			c.LSN, c.Snapshot = s.from, true
			obs, err := rows.Apply(c)
			if err != nil {
				return nil, err
			}
			b.Observations = append(b.Observations, obs...)
		}
	}
	return b, nil
}

// restore takes up the stored cursor: its position and held tenures.
func (s *Stream) restore(stored string) error {
	var c cursor
	if err := json.Unmarshal([]byte(stored), &c); err != nil {
		return fmt.Errorf("cursor: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(c.LSN)
	if err != nil {
		return fmt.Errorf("cursor: %w", err)
	}
	s.from = LSN(lsn)
	for _, rows := range s.tables {
		rows.restore(c.Held[rows.m.Table])
	}
	return nil
}

// cursor encodes the position and the held tenures of tables.
// Cursor is the position and the held tenures' tokens as of the last
// batch Start or Next returned, to store with it and give Start after a
// restart. It encodes every held row: a caller that merges batches reads
// it once, for the last.
func (s *Stream) Cursor() (string, error) { return s.cursor(s.tables, s.from) }

func (s *Stream) cursor(tables map[uint32]*Rows, at LSN) (string, error) {
	c := cursor{LSN: at.String(), Held: map[string][]heldLease{}}
	for _, rows := range tables {
		if h := rows.held(); len(h) > 0 {
			c.Held[rows.m.Table] = h
		}
	}
	b, err := json.Marshal(c)
	return string(b), err
}

// Next returns the next committed transaction that changed a table, or,
// when the server says it has sent everything up to a position, an empty
// batch there. It answers the server's keepalives meanwhile.
func (s *Stream) Next(ctx context.Context) (StreamBatch, error) {
	for {
		if err := s.sendStatusIfDue(ctx); err != nil {
			return StreamBatch{}, err
		}
		rctx, cancel := context.WithDeadline(ctx, s.statusDue)
		msg, err := s.repl.ReceiveMessage(rctx)
		cancel()
		switch {
		case err != nil && pgconn.Timeout(err) && ctx.Err() == nil:
			continue
		case err != nil:
			return StreamBatch{}, fmt.Errorf("slot %s: receive: %w", s.name, err)
		}
		b, ok, err := s.receive(ctx, msg)
		if err != nil || ok {
			return b, err
		}
	}
}

// receive handles one message, and returns a batch when it completes one.
func (s *Stream) receive(ctx context.Context, msg pgproto3.BackendMessage) (StreamBatch, bool, error) {
	switch msg := msg.(type) {
	case *pgproto3.ErrorResponse:
		return StreamBatch{}, false, fmt.Errorf("slot %s: %w", s.name, serverError(pgconn.ErrorResponseToPgError(msg)))
	case *pgproto3.CopyData:
		if len(msg.Data) == 0 {
			return StreamBatch{}, false, nil
		}
		switch msg.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
			if err != nil {
				return StreamBatch{}, false, err
			}
			if ka.ReplyRequested {
				s.statusDue = time.Time{}
			}
			if s.tx != nil {
				return StreamBatch{}, false, nil
			}
			if LSN(ka.ServerWALEnd) <= s.from {
				return StreamBatch{At: ka.ServerTime.UTC(), Position: s.from}, s.cfg.Heartbeats, nil
			}
			s.from = LSN(ka.ServerWALEnd)
			return StreamBatch{At: ka.ServerTime.UTC(), Position: s.from, Moved: true}, true, nil
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				return StreamBatch{}, false, err
			}
			return s.decode(xld.WALData)
		}
	}
	return StreamBatch{}, false, nil
}

// decode handles one pgoutput message.
func (s *Stream) decode(data []byte) (StreamBatch, bool, error) {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return StreamBatch{}, false, fmt.Errorf("slot %s: %w", s.name, err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		s.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		// The transaction's changes apply to the tables' rows as they
		// come: pgoutput sends committed transactions only, and after an
		// error the stream is given up (Start).
		s.tx = &streamTx{lsn: LSN(m.FinalLSN), at: m.CommitTime.UTC()}
	case *pglogrepl.InsertMessage:
		return StreamBatch{}, false, s.change(m.RelationID, nil, m.Tuple)
	case *pglogrepl.UpdateMessage:
		return StreamBatch{}, false, s.change(m.RelationID, m.OldTuple, m.NewTuple)
	case *pglogrepl.DeleteMessage:
		return StreamBatch{}, false, s.change(m.RelationID, m.OldTuple, nil)
	case *pglogrepl.TruncateMessage:
		return StreamBatch{}, false, s.truncate(m.RelationIDs)
	case *pglogrepl.CommitMessage:
		return s.commit(m)
	}
	return StreamBatch{}, false, nil
}

// change applies one row change of the transaction being received.
func (s *Stream) change(rel uint32, old, new *pglogrepl.TupleData) error {
	if s.tx == nil {
		return fmt.Errorf("slot %s: a change outside a transaction", s.name)
	}
	rows, lease := s.tables[rel]
	fence, fenced := s.fences[rel]
	if !lease && !fenced || s.tx.lsn < s.from {
		return nil // not a table of ours, or delivered before the restart
	}
	r, ok := s.relations[rel]
	if !ok {
		return fmt.Errorf("slot %s: a change of relation %d before its description", s.name, rel)
	}
	c := Change{At: s.tx.at, LSN: s.tx.lsn}
	var err error
	if c.Old, err = s.tuple(r, old); err != nil {
		return err
	}
	if c.New, err = s.tuple(r, new); err != nil {
		return err
	}
	if c.Old == nil && c.New == nil {
		return nil
	}
	if fenced {
		return s.written(fence, c)
	}
	obs, err := rows.Apply(c)
	if err != nil {
		return fmt.Errorf("slot %s: %w", s.name, err)
	}
	s.tx.obs = append(s.tx.obs, obs...)
	return nil
}

// truncate ends the held tenures of the tables of ours among rels.
func (s *Stream) truncate(rels []uint32) error {
	if s.tx == nil {
		return fmt.Errorf("slot %s: a truncate outside a transaction", s.name)
	}
	if s.tx.lsn < s.from {
		return nil
	}
	for _, rel := range rels {
		if rows, ok := s.tables[rel]; ok {
			s.tx.obs = append(s.tx.obs, rows.Truncate(Change{At: s.tx.at, LSN: s.tx.lsn})...)
		}
	}
	return nil
}

// tuple decodes a row image sent in text; an unchanged TOASTed value is
// left out, as Rows.Apply expects.
func (s *Stream) tuple(r *pglogrepl.RelationMessage, t *pglogrepl.TupleData) (Row, error) {
	if t == nil {
		return nil, nil
	}
	row := make(Row, len(t.Columns))
	for i, col := range t.Columns {
		if i >= len(r.Columns) {
			break
		}
		name, oid := r.Columns[i].Name, r.Columns[i].DataType
		switch col.DataType {
		case 'n':
			row[name] = nil
		case 't':
			v, err := s.value(oid, col.Data)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", r.RelationName, name, err)
			}
			row[name] = v
		}
	}
	return row, nil
}

// value decodes a column's text as pgx would read the column.
func (s *Stream) value(oid uint32, data []byte) (any, error) {
	if t, ok := s.types.TypeForOID(oid); ok {
		return t.Codec.DecodeValue(s.types, oid, pgtype.TextFormatCode, data)
	}
	return string(data), nil
}

// commit ends the transaction being received: its decoding becomes the
// stream's, and its observations a batch, unless the server sent it again
// after a restart.
func (s *Stream) commit(m *pglogrepl.CommitMessage) (StreamBatch, bool, error) {
	tx := s.tx
	s.tx = nil
	if tx == nil || tx.lsn < s.from {
		return StreamBatch{}, false, nil
	}
	if LSN(m.CommitLSN) != tx.lsn {
		// pgoutput sends the commit LSN as Begin's final LSN
		// (logicalrep_write_begin): the grants' tokens rest on it.
		return StreamBatch{}, false, fmt.Errorf("slot %s: begin said the commit would be at %s, the commit is at %s", s.name, tx.lsn, LSN(m.CommitLSN))
	}
	s.from = LSN(m.TransactionEndLSN)
	return StreamBatch{Observations: tx.obs, Writes: tx.writes, At: tx.at, Position: s.from, Moved: true}, true, nil
}

// Confirm tells the server that everything up to position (a batch's
// Position) is durable: the slot may let go of the WAL before it.
func (s *Stream) Confirm(ctx context.Context, position LSN) error {
	if position > s.confirmed {
		s.confirmed = position
	}
	return s.sendStatus(ctx, false)
}

// sendStatusIfDue reports the confirmed position when it is time to, or
// when the server asked.
func (s *Stream) sendStatusIfDue(ctx context.Context) error {
	if time.Now().Before(s.statusDue) {
		return nil
	}
	return s.sendStatus(ctx, s.cfg.Heartbeats)
}

// sendStatus reports the confirmed position, asking for a keepalive back
// if ask.
func (s *Stream) sendStatus(ctx context.Context, ask bool) error {
	pos := pglogrepl.LSN(s.confirmed)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos, WALFlushPosition: pos, WALApplyPosition: pos, ClientTime: time.Now(),
		ReplyRequested: ask,
	})
	if err != nil {
		return fmt.Errorf("slot %s: status update: %w", s.name, err)
	}
	s.statusDue = time.Now().Add(s.cfg.StatusInterval)
	return nil
}

// Close ends the replication connection; the slot stays, holding the WAL
// from the confirmed position for the next Start.
func (s *Stream) Close(ctx context.Context) error {
	if s.repl == nil {
		return nil
	}
	err := s.repl.Close(ctx)
	s.repl = nil
	return err
}

// Drop removes the slot and the publication, for a source no longer
// configured: a slot nobody reads would hold WAL forever. The stream must
// be closed.
func Drop(ctx context.Context, url, source string) error {
	return dropStream(ctx, &Stream{cfg: StreamConfig{URL: url}}, source)
}

// dropStream is Drop, connecting as s would.
func dropStream(ctx context.Context, s *Stream, source string) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := SlotName(source)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("drop slot %s: %w", name, err)
	}
	if exists {
		// DROP_REPLICATION_SLOT ... WAIT waits for the walsender of a
		// stream just closed to let go of the slot.
		repl, err := s.connectReplication(ctx)
		if err != nil {
			return err
		}
		defer repl.Close(context.WithoutCancel(ctx))
		if err := pglogrepl.DropReplicationSlot(ctx, repl, name, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
			return fmt.Errorf("drop slot %s: %w", name, err)
		}
	}
	// A publication of another role's (an operator created it) is its
	// owner's to drop: it holds no WAL.
	var own bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1
		AND pubowner = (SELECT oid FROM pg_roles WHERE rolname = current_user))`, name).Scan(&own); err != nil || !own {
		return err
	}
	if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+name); err != nil {
		return fmt.Errorf("drop publication %s: %w", name, err)
	}
	return nil
}

// RetainedWAL returns how many bytes of WAL source's slot keeps the server
// from recycling (from its restart_lsn to the current position), and false
// when the slot does not exist. It grows while the stream is down or its
// positions are not confirmed; past max_slot_wal_keep_size the server
// invalidates the slot (ErrSlotLost).
func RetainedWAL(ctx context.Context, conn *pgx.Conn, source string) (int64, bool, error) {
	var n *int64
	err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, SlotName(source)).Scan(&n)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("slot %s: retained WAL: %w", SlotName(source), err)
	case n == nil:
		return 0, true, nil // invalidated: restart_lsn is NULL
	}
	return *n, true, nil
}

// sortedOIDs lists the tables' OIDs in order, for a stable initial read.
func sortedOIDs(tables map[uint32]*Rows) []uint32 { return slices.Sorted(maps.Keys(tables)) }
