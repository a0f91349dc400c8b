package migrations

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// landed pins the SHA-256 of every migration that has shipped. A migration is
// never edited after it lands: add the next number instead, and its hash here.
var landed = map[string]map[string]string{
	"sqlite": {
		"0001_init.sql":                     "542aeee7059700075fa72ae08afc3b7706f91d8c45c952d62af02d2b0d8249f4",
		"0002_dashboard.sql":                "de5c1a3144d320cc4bafec9a08b30cbcecbf7cf3b4e90b910534fb27ddc05aea",
		"0003_lock_list_cover.sql":          "5ac15b6497d5cfd277769f51a2690238fc5ae83ff762924de1250be30b07fe16",
		"0004_lock_counts_triggers.sql":     "a79992b0a278cc6584614ae08e0d662c317dff075ad463b62fa655eb96865f60",
		"0005_renewal_rows.sql":             "c3413529e30806274c62e900608aa69d1afcf2233358146b6a26a724105927ad",
		"0006_event_indexes.sql":            "374d0a138472a15d353d11860659b8bbed17fc026cf9ca8a5638876585b02904",
		"0007_finding_class.sql":            "e357fe700f19e76c99f6e0de4c426c82e7911bb45187d8f28bdcedd8ac5d00e3",
		"0008_compact_renewals.sql":         "4bb245907484307a68e0d923afa0c36eaa5567515f78b0befd48407aa51702cb",
		"0009_finding_lock_indexes.sql":     "19807ff6334b4a216fc788cdcfddb3b43f0fdd575ea911181dea58d1839f5639",
		"0010_request_id_scope.sql":         "1fcfb9b85e963851ab80ecb6b49c1229a8efd049827e3a5501b9787ec4b5329f",
		"0011_time_none.sql":                "a00b0439a89fa60ee6032c6fc26ec9ec4c1384cd2b3fa8cf3ab1ce81c10eba4a",
		"0012_source_fences.sql":            "bbaf2197f455f6bee817052702436f3d9875e9a416adee52f0e6233b62263360",
		"0013_source_sync.sql":              "a6b75b3c31a6d47497ff2ffead0ac339a5c886b1e89d8316ba37ba6572d0b9c2",
		"0014_fence_refusals.sql":           "aedb1beda0518e054304c3cfe6ed7df721ad018c23cbb68156aff8894237647d",
		"0015_tenures_by_holder.sql":        "23f2e50c5e52a94f771b5120157059a0d83f45eb08c8d7d6cd81bbe5d1740c09",
		"0016_lock_verdicts.sql":            "a6ef43c249b01ae379012cec0785b92a8486003b8d0d4cc3118542e0297316d6",
		"0017_findings_lock_severity.sql":   "b198402c2d0d4493215fff801a926c1688455c51e205f65afe2cb98de887fc8a",
		"0018_write_bins.sql":               "616db9aa1d8f9b4292577e8d707fc00f22b36030daa44de513739a7cdd686ec4",
		"0019_events_lock_at_kind.sql":      "dd9b3d05b1129041d78a4c9f58e444ea01d18c1855ab2094b1e31a94de0a493f",
		"0020_findings_lock_kind_cover.sql": "77813f3b11b9373e0beae98de13f14f1bb0f67ebde228560b4d44fe4fb12581e",
		"0021_events_lock_writes.sql":       "9a44f2ad8328dc0c340c2c19c1b9951d278eff38cd02c71bd50010bf8b2bd3cb",
		"0022_write_ticks.sql":              "bed11adb0a7878ccfa6e8f004fe5c7ca2ce1c8e1c132271152a0ff21393055d0",
		"0023_finding_minutes.sql":          "6e8eada1032e716464c79c80bd16941101140f2d2e425c22bbea82369c5fc8c4",
		"0024_lock_resources.sql":           "975ec07dc074f665d8a7c4737e1303a17f1ff193d1ee5d4c4a084df2fcf19ceb",
		"0025_renewal_runs.sql":             "84eb086eafae940b29b80e07a2dffebfc3f2c2ab8b0bc3bc4d1a086038ab5aa1",
		"0026_renewal_log.sql":              "303bc6a4bb8f2d0f73a00c27b2d3c8280b07757d17da2ff74e2d5eab1c3de3ab",
		"0027_lock_renewal_columns.sql":     "60a2e3394fd19c86c127bc42391cbc4a182f6e6beafe4cfa44c3849eb5a08681",
	},
	"postgres": {
		"0001_init.sql":                     "e171e52fca31731e3df93bd3f03887adcab10d4b0f5e567de67db7e862fa47fe",
		"0002_events_column_order.sql":      "f2e4897318ad52affdf3d6400dbe8e98f9223735548abde7aa25bd7492bb2257",
		"0003_renewals.sql":                 "447f0f2910a3642df347d00850045472c9d6b130f8e9944f3dbcbd89ba550b80",
		"0004_source_fences.sql":            "497a023a2d021b6771b4bae248142afebda35d7dfafc25eb5b2ea7fab967192c",
		"0005_source_sync.sql":              "0fb6fc6f2b196b29f0b7bed0bfe447aad0ea33ae1672b53773ef17e3a5f1b593",
		"0006_fence_refusals.sql":           "e02173abdb0458e2a870a46dcab2e6c52bf258be1cfb316f41a52ff3342e52ff",
		"0007_tenures_by_holder.sql":        "0a8b43c5b69f13dd7a1abc04d1d2179472cc4e2fe20cb26fe84b2c24d13d5786",
		"0008_lock_verdicts.sql":            "70e39d86e9a59423908ab045e48a33008d74b64febc448b7a283df7b995eb632",
		"0009_findings_lock_severity.sql":   "0e6e46fd67c9d1372c9af93ccaa875d48594f06a5066a0d3ed8d6b05ab0b9fb7",
		"0010_write_bins.sql":               "6531e4659854c9057780c845faec5a82643b56a4b5b619460ee92db1e50cab46",
		"0011_findings_lock_kind_cover.sql": "b360be2ad5282d2841fef7cbeea457501449f86315ded738c45b09a2de095f7d",
		"0012_write_ticks.sql":              "1e85a802dd5be9eb8b16c67781329212841ec215c6a4c976134b0e6a4555d7ab",
		"0013_finding_minutes.sql":          "841996efba604010e94c11a344b6896253d284ad38144f553eac8cd81fa267c0",
		"0014_lock_resources.sql":           "84fb1d677c827e0c0ee4827e3dbc8204bb1e29d5684eff313af5bd317274fa7f",
		"0015_renewal_runs.sql":             "1feffd9154402ce83599c430e6105df0d9e00e2cfbd0e719b512fa757effd812",
		"0016_renewal_log.sql":              "933a98f35e694e8c0988dc376c286cc9d7c9de96ee0062c531ae12b615221d17",
		"0017_lock_renewal_columns.sql":     "923298c66c30f069808caa12495d4936032c18079904c4130d2e229318d094ab",
	},
}

// sets are the embedded migration sets by engine.
var sets = map[string]fs.FS{"sqlite": SQLite, "postgres": Postgres}

func TestLandedMigrationsAreUnchanged(t *testing.T) {
	for engine, files := range landed {
		for name, want := range files {
			b, err := fs.ReadFile(sets[engine], name)
			if err != nil {
				t.Errorf("landed migration %s/%s is missing: %v", engine, name, err)
				continue
			}
			sum := sha256.Sum256(b)
			if got := hex.EncodeToString(sum[:]); got != want {
				t.Errorf("%s/%s sha256 = %s, want %s: landed migrations are append-only; add a new file instead", engine, name, got, want)
			}
		}
	}
}

func TestEmbeddedMigrationsAreNumberedFromOneWithoutGaps(t *testing.T) {
	for engine, set := range sets {
		ms, err := Load(set)
		if err != nil {
			t.Fatalf("Load %s: %v", engine, err)
		}
		if len(ms) == 0 {
			t.Fatalf("no %s migrations embedded", engine)
		}
		for i, m := range ms {
			if m.Version != i+1 {
				t.Errorf("%s migration %d is %s (version %d), want version %d", engine, i, m.Name, m.Version, i+1)
			}
			if strings.TrimSpace(m.SQL) == "" {
				t.Errorf("%s migration %s is empty", engine, m.Name)
			}
		}
	}
}

// TestSQLiteSetKeepsItsVersions pins the version and name of every SQLite
// migration: databases record them in schema_migrations, so moving or
// renaming a file must not give one a new version, or an existing database
// would apply it again.
func TestSQLiteSetKeepsItsVersions(t *testing.T) {
	ms, err := Load(SQLite)
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]int)
	for _, m := range ms {
		got[m.Name] = m.Version
	}
	for name := range landed["sqlite"] {
		var v int
		if _, err := fmt.Sscanf(name, "%04d_", &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got[name] != v {
			t.Errorf("%s loads as version %d, want %d", name, got[name], v)
		}
	}
}

func TestLoadOrdersByVersion(t *testing.T) {
	ms, err := Load(fstest.MapFS{
		"0010_later.sql":  {Data: []byte("SELECT 10;")},
		"0002_second.sql": {Data: []byte("SELECT 2;")},
		"README.md":       {Data: []byte("not a migration")},
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(ms) != 2 || ms[0].Version != 2 || ms[1].Version != 10 || ms[1].SQL != "SELECT 10;" {
		t.Errorf("Load = %+v, want versions 2 then 10 with their SQL", ms)
	}
}

func TestLoadRejectsBadNames(t *testing.T) {
	for name, files := range map[string]fstest.MapFS{
		"NoNumber":        {"init.sql": {}},
		"ShortNumber":     {"1_init.sql": {}},
		"UpperCase":       {"0001_Init.sql": {}},
		"VersionZero":     {"0000_init.sql": {}},
		"DuplicateNumber": {"0001_a.sql": {}, "0001_b.sql": {}},
	} {
		t.Run(name, func(t *testing.T) {
			if ms, err := Load(files); err == nil {
				t.Errorf("Load = %+v, want an error", ms)
			}
		})
	}
}
