-- Commits the fence refused, kept until the owner of leasewatch's own
-- source records each as a rejected write (resource "store") on the
-- ownership lock of the refused source, and deletes it in the same
-- transaction. A deposed replica writes its refusal here, under no fence:
-- it owns nothing it could record the write under itself.
CREATE TABLE fence_refusals (
	id      INTEGER PRIMARY KEY,
	source  TEXT    NOT NULL,
	token   INTEGER NOT NULL,
	highest INTEGER NOT NULL,
	at      INTEGER NOT NULL,
	replica TEXT    NOT NULL,
	events  INTEGER NOT NULL, -- what the refused commit held, for the write's detail
	inputs  INTEGER NOT NULL,
	writes  INTEGER NOT NULL
);
