package audit

import (
	"errors"
	"io"
	"testing"
)

func TestCausedShowsUsersTheDomainErrorAndKeepsTheCause(t *testing.T) {
	err := Caused(Errorf(EUNAVAILABLE, "the database server cannot be reached"), io.ErrUnexpectedEOF)
	if got := ErrorCode(err); got != EUNAVAILABLE {
		t.Errorf("ErrorCode = %q, want %q", got, EUNAVAILABLE)
	}
	if got := ErrorMessage(err); got != "the database server cannot be reached" {
		t.Errorf("ErrorMessage = %q: the cause must not reach users", got)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Error("errors.Is does not find the cause")
	}
	if want := "the database server cannot be reached: unexpected EOF"; err.Error() != want {
		t.Errorf("Error() = %q, want %q for logs", err.Error(), want)
	}
}
