package collectors

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A secret's value never shows when it, or a configuration holding it, is
// printed or logged; a file is read on each Get, and a missing or empty one
// is an error naming the file.
func TestSecret(t *testing.T) {
	const value = "hunter2-value"
	path := filepath.Join(t.TempDir(), "password")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(" " + value + "\n")

	type config struct {
		User     string
		Password Secret
	}
	for _, s := range []Secret{Password(value), PasswordFile(path)} {
		var logged bytes.Buffer
		slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "password", s, "config", config{"u", s})
		for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%+v", config{"u", s}), fmt.Sprintf("%#v", config{"u", s}), logged.String()} {
			if strings.Contains(out, value) {
				t.Errorf("%q shows the password", out)
			}
		}
		if got, err := s.Get(); err != nil || got != value {
			t.Errorf("%v: Get() = %q, %v; want the password", s, got, err)
		}
		if s.IsZero() {
			t.Errorf("%v: IsZero, want a password", s)
		}
	}
	if !(Secret{}).IsZero() || !Password("").IsZero() {
		t.Error("the zero Secret and an empty password: want IsZero")
	}

	file := PasswordFile(path)
	write("rotated\n")
	if got, err := file.Get(); err != nil || got != "rotated" {
		t.Errorf("Get() after the file changed = %q, %v; want rotated", got, err)
	}
	write(" \n")
	if _, err := file.Get(); err == nil || err.Error() != path+" is empty" {
		t.Errorf("Get() of an empty file: err = %v, want %q", err, path+" is empty")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := file.Get(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Get() of a missing file: err = %v, want one naming %s", err, path)
	}
}
