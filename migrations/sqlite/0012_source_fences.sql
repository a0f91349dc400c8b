-- The fence of each source: the highest ownership token a batch of its rows
-- has carried. When replicas share a store, each batch moves its sources'
-- fences up in the same transaction as its rows, and a batch under a lower
-- token (a replica that lost the source's lease) is rolled back whole.
CREATE TABLE source_fences (
	source TEXT    PRIMARY KEY,
	token  INTEGER NOT NULL
);
