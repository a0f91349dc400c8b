// Package storetest is the contract every audit store keeps: the behaviour
// the recorder, the retainer, the web server and reports rely on, checked
// through the audit interfaces alone. A store's tests run it with a Harness
// that opens that store; a new store is written against this suite.
package storetest

import (
	"testing"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// Store is the store under test: everything the service uses of a store
// (audit.Database), and both ends of leasewatch copy: the whole store read
// as of one moment, and rows imported into an empty store.
type Store interface {
	audit.Database
	storecopy.Source
	storecopy.Target
}

// Harness says how to get a store under test.
type Harness struct {
	// Open returns a new, empty store (its own database) for one test,
	// closed at the test's end.
	Open func(t *testing.T) Store
	// Reopen closes s and opens the same database again, as a restart
	// would. The store it returns is closed at the test's end.
	Reopen func(t *testing.T, s Store) Store
	// AddLocks, if set, stores n lock rows of source "bulk" named
	// bulk-00000, bulk-00001, ... (and nothing else) quicker than one batch
	// through Apply would: setup for the test that needs thousands of locks.
	// Nil means through Apply.
	AddLocks func(t *testing.T, s Store, n int)
	// Second, if set, opens another store on s's database, as a second
	// replica sharing it would, closed at the test's end. Nil skips the
	// cases that need two.
	Second func(t *testing.T, s Store) Store
	// Log says the store writes renewals into a renewal log (SQLite's
	// migration 0026, PostgreSQL's 0016): the log's cases (logCases) run
	// too.
	Log bool
	// Rebucket, with Log, folds every synced commit row of the log into
	// rows of the locks' buckets, as the store does once enough are
	// synced.
	Rebucket func(t *testing.T, s Store)
}

// Run runs the contract suite as subtests of t. Each subtest opens its own
// store, so they pass in any order and alone (go test -run Contract/Name).
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil || h.Reopen == nil {
		t.Fatal("storetest: Harness needs Open and Reopen")
	}
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
	if h.Log {
		if h.Rebucket == nil {
			t.Fatal("storetest: Harness with Log needs Rebucket")
		}
		for _, c := range logCases {
			t.Run(c.name, func(t *testing.T) { c.run(t, h) })
		}
	}
}

// contract is the suite, grouped by the side of the store each part checks.
var contract = []struct {
	name string
	run  func(*testing.T, Harness)
}{
	// The journal: what the recorder writes and restores.
	{"ApplyRoundTripsEveryField", testApplyRoundTripsEveryField},
	{"CompactRenewalsReadBackWhole", testCompactRenewalsReadBackWhole},
	{"ApplyLaterEntriesReplaceEarlier", testApplyLaterEntriesReplaceEarlier},
	{"ApplyFailureRollsBackEverything", testApplyFailureRollsBackEverything},
	{"ApplyEmptyBatchIsNoop", testApplyEmptyBatchIsNoop},
	{"ErrorsWrapContext", testErrorsWrapContext},
	{"RestoreRoundTripsTrackState", testRestoreRoundTripsTrackState},
	{"ResourcesAreRowsOfTheirOwn", testResourcesAreRowsOfTheirOwn},
	{"RestoreEmptyDatabase", testRestoreEmptyDatabase},
	{"StoredWrites", testStoredWrites},
	{"RenewedTouchesOnlyRenewalColumnsAndSyncedEndsUnsynced", testRenewedTouchesOnlyRenewalColumnsAndSyncedEndsUnsynced},
	{"SyncMarkSpansBatches", testSyncMarkSpansBatches},
	{"ConcurrentReadsDuringWrites", testConcurrentReadsDuringWrites},
	{"ReopenKeepsData", testReopenKeepsData},
	{"SizeGrowsWithEvents", testSizeGrowsWithEvents},

	// Fencing: replicas that share the store, each source under its
	// owner's token.
	{"FenceRefusedBatchLeavesNothing", testFenceRefusedBatchLeavesNothing},
	{"FenceEqualTokenCommits", testFenceEqualTokenCommits},
	{"FenceHigherTokenMovesIt", testFenceHigherTokenMovesIt},
	{"FencesOfSeveralSources", testFencesOfSeveralSources},
	{"FenceTwoReplicasRace", testFenceTwoReplicasRace},
	{"RecorderTakeoverResumesTheSource", testRecorderTakeoverResumesTheSource},
	{"RefusalsAreKeptUntilRecorded", testRefusalsAreKeptUntilRecorded},
	{"RecorderRecordsRefusalsOnItsOwnLock", testRecorderRecordsRefusalsOnItsOwnLock},
	{"SyncOfOneSourceLeavesTheOthers", testSyncOfOneSourceLeavesTheOthers},
	{"SyncRoundOfOneSource", testSyncRoundOfOneSource},
	{"SyncOfTheStoreRaisesSourceMarks", testSyncOfTheStoreRaisesSourceMarks},

	// The recorder over the store: restarts, failed commits, request ids
	// and the fresh overlay of unsynced renewals.
	{"RecorderObserveIsDurableAndResumes", testRecorderObserveIsDurableAndResumes},
	{"RecorderWriteReportsAreIdempotent", testRecorderWriteReportsAreIdempotent},
	{"RecorderRequestIDsAreScopedToLockAndResource", testRecorderRequestIDsAreScopedToLockAndResource},
	{"RecorderConflictRefusesOnlyItsRequest", testRecorderConflictRefusesOnlyItsRequest},
	{"RecorderBoundsWriteOnlyLocksAcrossRestarts", testRecorderBoundsWriteOnlyLocksAcrossRestarts},
	{"RecorderFailedCommitLosesNothingAcknowledged", testRecorderFailedCommitLosesNothingAcknowledged},
	{"RecorderReloadsAfterTheStoreReturns", testRecorderReloadsAfterTheStoreReturns},
	{"RecorderCommitWhoseAnswerIsLost", testRecorderCommitWhoseAnswerIsLost},
	{"RecorderRenewalsSurviveACrashBetweenSyncs", testRecorderRenewalsSurviveACrashBetweenSyncs},
	{"RecorderCommitsCarryTheirRenewals", testRecorderCommitsCarryTheirRenewals},
	{"RecorderSpreadsASyncOverCommits", testRecorderSpreadsASyncOverCommits},
	{"RecorderSyncsHeartbeatsLessOften", testRecorderSyncsHeartbeatsLessOften},
	{"RecorderRenewalsSurviveACrashInASyncRound", testRecorderRenewalsSurviveACrashInASyncRound},
	{"RecorderFenceRefusalKeepsOtherSources", testRecorderFenceRefusalKeepsOtherSources},
	{"RecorderSetFenceCutsOffTheOldOwner", testRecorderSetFenceCutsOffTheOldOwner},
	{"RecorderDropFenceGivesTheSourceUp", testRecorderDropFenceGivesTheSourceUp},

	// The read side: lists, filters, pages and errors.
	{"LocksFilters", testLocksFilters},
	{"LocksDefaultAndMaxLimit", testLocksDefaultAndMaxLimit},
	{"LocksSortsAndKeysetPages", testLocksSortsAndKeysetPages},
	{"EventsFilters", testEventsFilters},
	{"EventsBeforeCursorPagesBack", testEventsBeforeCursorPagesBack},
	{"WriteEventsReadWhatEventsRead", testWriteEventsReadWhatEventsRead},
	{"TenuresOverlappingWindow", testTenuresOverlappingWindow},
	{"TenuresByHolder", testTenuresByHolder},
	{"WriteLoad", testWriteLoad},
	{"FindingsFilters", testFindingsFilters},
	{"FindingsBySourceOverlapAndCursor", testFindingsBySourceOverlapAndCursor},
	{"FindingsByLockClass", testFindingsByLockClass},
	{"LastEventAtPerSource", testLastEventAtPerSource},
	{"MissingLockIsNotFound", testMissingLockIsNotFound},
	{"LockNotFoundThenStored", testLockNotFoundThenStored},

	// The dashboard's aggregates.
	{"LockCounts", testLockCounts},
	{"LockCountsAcrossBatches", testLockCountsAcrossBatches},
	{"EventTimes", testEventTimes},
	{"WriteCounts", testWriteCounts},
	{"WriteCountsMatchesBinningTimes", testWriteCountsMatchesBinningTimes},
	{"FindingCountsAgreeWithTheirFindings", testFindingCountsAgreeWithTheirFindings},
	{"WriteCountsInTicks", testWriteCountsInTicks},
	{"WriteCountsInTicksAgreeWithItsWrites", testWriteCountsInTicksAgreeWithItsWrites},
	{"WriteTicks", testWriteTicks},
	{"WriteStats", testWriteStats},
	{"WriteStatsAgreesWithItsWrites", testWriteStatsAgreesWithItsWrites},
	{"FindingsByResource", testFindingsByResource},
	{"WriteMarks", testWriteMarks},
	{"Verdicts", testVerdicts},
	{"BlindWindowsOnePerSourceInterval", testBlindWindowsOnePerSourceInterval},
	{"Cursors", testCursors},

	// Retention.
	{"RetentionPrunesByKindAndKeepsRenewalSummaries", testRetentionPrunesByKindAndKeepsRenewalSummaries},
	{"RetentionKeepsUnsyncedRenewals", testRetentionKeepsUnsyncedRenewals},
	{"RetainerPrunesOnlyWhileActive", testRetainerPrunesOnlyWhileActive},
	{"RetentionSummarisesRenewalsStoredWithoutTheirTenure", testRetentionSummarisesRenewalsStoredWithoutTheirTenure},
	{"PruneEventsRejectsANonPositiveLimit", testPruneEventsRejectsANonPositiveLimit},

	// Renewal runs: sealing, and every read of renewals over runs and rows.
	{"RunsRoundTripEveryField", testRunsRoundTripEveryField},
	{"RunsPageWithBeforeCursors", testRunsPageWithBeforeCursors},
	{"RunsCutByACrash", testRunsCutByACrash},
	{"RunsTakeoverRestoresTheOpenTenure", testRunsTakeoverRestoresTheOpenTenure},
	{"RunsRetentionKeepsARunWhole", testRunsRetentionKeepsARunWhole},
	{"RunsSealPreviousRenewalRows", testRunsSealPreviousRenewalRows},
	{"RunsNewEventAfterSealingIsUnsynced", testRunsNewEventAfterSealingIsUnsynced},
	{"PruneNewEventAfterPruningIsUnsynced", testPruneNewEventAfterPruningIsUnsynced},

	// Times at the ends of the range.
	{"EpochRoundTripsThroughTheDatabase", testEpochRoundTripsThroughTheDatabase},
	{"WindowBeyondTheRangeReturnsWhatIsInside", testWindowBeyondTheRangeReturnsWhatIsInside},

	// Copying a store into another (leasewatch copy).
	{"CopyMovesTheWholeHistory", testCopyMovesTheWholeHistory},
	{"CopyResumesAfterEveryInterruption", testCopyResumesAfterEveryInterruption},
	{"CopyRefusesATargetWithOtherData", testCopyRefusesATargetWithOtherData},
	{"CopyRefusesToResumeFromAChangedSource", testCopyRefusesToResumeFromAChangedSource},
	{"CopyVerifiesCounts", testCopyVerifiesCounts},
}
