package collectors

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Secret is a backend password, given as it is or as a file that holds it.
// A file is read again each time a collector connects, so a rotated
// password (a Kubernetes Secret mounted as a file is updated in place)
// takes effect on the next connection without a restart. The zero Secret
// is no password. Its value never appears in what it prints or logs.
type Secret struct {
	value string
	file  string
}

// Password is a secret given as it is.
func Password(value string) Secret { return Secret{value: value} }

// PasswordFile is a secret read from path on each connection, without
// surrounding white space.
func PasswordFile(path string) Secret { return Secret{file: path} }

// IsZero reports whether s is no password.
func (s Secret) IsZero() bool { return s.value == "" && s.file == "" }

// Get returns the password: for a file, what it holds now. An unreadable
// or empty file is an error, which names the file and never its content.
func (s Secret) Get() (string, error) {
	if s.file == "" {
		return s.value, nil
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", s.file)
	}
	return v, nil
}

// String hides the value, so that printing a configuration never shows it.
func (s Secret) String() string {
	switch {
	case s.file != "":
		return "password from " + s.file
	case s.value != "":
		return "password"
	}
	return "no password"
}

// GoString hides the value from %#v too.
func (s Secret) GoString() string { return s.String() }

// LogValue hides the value from structured logs.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }
