package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("sources:\n  - name: x\n    kind: etcd\n    prefixes: [\"/l/\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A good file whose ingest token file is missing: only a check that
	// reads the secrets finds that out.
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("database: "+filepath.Join(dir, "lw.db")+"\ningest_tokens_file: "+filepath.Join(dir, "none")+
		"\nsources:\n  - name: x\n    kind: etcd\n    endpoints: [\"127.0.0.1:2379\"]\n    prefixes: [\"/l/\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    string
		wantStderr string
	}{
		{"Version", []string{"version"}, 0, "leasewatch ", ""},
		{"Help", []string{"help"}, 0, "leasewatch serve", ""},
		{"NoCommand", nil, 2, "", "Usage:"},
		{"UnknownCommand", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"ServeMissingConfig", []string{"serve", "--config", filepath.Join(t.TempDir(), "none.yaml")}, 1, "", "read config"},
		{"ServeBadConfigNamesTheField", []string{"serve", "--config", bad}, 1, "", "sources[0].endpoints"},
		{"ServeUnknownFlag", []string{"serve", "--confg", "x"}, 2, "", "flag provided but not defined"},
		{"ServeCPUProfileUnwritable", []string{"serve", "--cpuprofile", filepath.Join(t.TempDir(), "no", "cpu.pprof")}, 2, "", "cpuprofile: open"},
		{"ServeMemProfileUnwritable", []string{"serve", "--memprofile", filepath.Join(t.TempDir(), "no", "heap.pprof")}, 2, "", "memprofile: open"},
		{"CheckConfigNamesTheField", []string{"check", "config", bad}, 1, "", "sources[0].endpoints"},
		{"CheckConfigReadsTheSecrets", []string{"check", "config", good}, 1, "", "ingest_tokens_file"},
		{"CheckConfigSyntaxOnly", []string{"check", "config", "--syntax-only", good}, 0, good + ": OK, 1 source(s), database ", ""},
		{"CheckConfigEveryFile", []string{"check", "config", "--syntax-only", good, bad}, 1, good + ": OK", bad + ": sources[0].endpoints"},
		{"CheckConfigMissingFile", []string{"check", "config", filepath.Join(dir, "none.yaml")}, 1, "", "read config"},
		{"CheckWhat", []string{"check", "rules"}, 2, "", "want: check config"},
		{"CheckConfigNoFile", []string{"check", "config"}, 2, "", "name at least one file"},
		{"DemoBadListen", []string{"demo", "--listen", "nowhere"}, 2, "", "--listen"},
		{"DemoStrayArgument", []string{"demo", "extra"}, 2, "", `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit code = %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) || !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Fatalf("stdout = %q, stderr = %q; want %q and %q in them", stdout.String(), stderr.String(), tt.wantOut, tt.wantStderr)
			}
		})
	}
}

// TestServeWritesCPUProfile checks that serve --cpuprofile leaves a profile
// behind however serve ends, here with a configuration it cannot read.
func TestServeWritesCPUProfile(t *testing.T) {
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--cpuprofile", profile, "--config", filepath.Join(t.TempDir(), "none.yaml")}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit code = %d, want 1; stderr: %s", code, stderr.String())
	}
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v (size %d), want a written profile", profile, err, sizeOf(fi))
	}
}

// TestServeWritesHeapProfile checks that serve --memprofile writes a heap
// profile (gzipped, as pprof writes them) when it is told to stop, and when
// it ends on its own.
func TestServeWritesHeapProfile(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for name, ctx := range map[string]context.Context{"Stopped": stopped, "Ended": context.Background()} {
		t.Run(name, func(t *testing.T) {
			profile := filepath.Join(t.TempDir(), "heap.pprof")
			var stdout, stderr bytes.Buffer
			if code := run(ctx, []string{"serve", "--memprofile", profile, "--config", filepath.Join(t.TempDir(), "none.yaml")}, &stdout, &stderr); code != 1 {
				t.Fatalf("exit code = %d, want 1; stderr: %s", code, stderr.String())
			}
			b, err := os.ReadFile(profile)
			if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
				t.Fatalf("profile %s: %v (%d bytes), want a gzipped profile", profile, err, len(b))
			}
		})
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}
