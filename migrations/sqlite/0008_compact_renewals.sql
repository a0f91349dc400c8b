-- Renewals in fewer bytes, and retention. A renewal's holder and token are
-- its tenure's, so a renew row now names the tenure (seq) and leaves holder
-- and token empty; its margin and the backend's renewal time, which were
-- JSON in detail, are integer columns. Readers join the tenure back in and
-- rebuild the detail (audit/sqlite's eventColumns), so the API is unchanged.
-- Rows stored before this keep their holder, token and detail, and no seq.
ALTER TABLE events ADD COLUMN seq INTEGER;            -- renew: the tenure's seq
ALTER TABLE events ADD COLUMN margin_permille INTEGER; -- renew: detail margin_ratio × 1000
ALTER TABLE events ADD COLUMN renewed_at INTEGER;      -- renew: detail renewed_at, unix ns

-- What retention pruned of each tenure's renewals: how many, the first and
-- last, and the least margin (permille; NULL when none was known). The
-- tenure row keeps its total count and last renewal.
CREATE TABLE renewal_summaries (
	lock_id            INTEGER NOT NULL REFERENCES locks (id),
	seq                INTEGER NOT NULL,
	renewals           INTEGER NOT NULL,
	first_at           INTEGER NOT NULL,
	last_at            INTEGER NOT NULL,
	min_margin_permille INTEGER,
	PRIMARY KEY (lock_id, seq)
) WITHOUT ROWID;
