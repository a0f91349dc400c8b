package zkserver

import (
	"os"
	"strings"
	"testing"
)

func TestStartAnswersAndRestarts(t *testing.T) {
	s, err := Start()
	if err == ErrMissing && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if out, err := FourLetterWord(s.Addr, "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok = %q, %v", out, err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := FourLetterWord(s.Addr, "srvr"); err != nil || !strings.Contains(out, "standalone") {
		t.Fatalf("srvr after restart = %q, %v", out, err)
	}
}
