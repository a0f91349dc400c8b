package audit

import (
	"errors"
	"fmt"
)

// Error codes. The web package maps each to an HTTP status in one place.
const (
	EINVALID      = "invalid"      // the request is malformed; the message names the field
	ENOTFOUND     = "not_found"    // the named thing does not exist
	EUNAUTHORIZED = "unauthorized" // missing or wrong credentials
	ETOOLARGE     = "too_large"    // the request body is over its limit
	EUNAVAILABLE  = "unavailable"  // the service cannot take the request now (shutting down, disk full)
	ECONFLICT     = "conflict"     // the request contradicts what is stored (a request_id reused for another write)
	EUNSUPPORTED  = "unsupported"  // the request's encoding is not one leasewatch takes
	EFENCED       = "fenced"       // a newer owner holds the source: this replica may no longer write it (see Fence)
	EINTERNAL     = "internal"
)

// Error is leasewatch's domain error: a code and a message safe to show users.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns err's code: the Code of the first *Error in its chain, or
// EINTERNAL for any other non-nil error.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the user-facing message of err: the *Error's message, or
// a generic one for internal errors so infrastructure details never leak.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// Caused returns e explained by cause: errors.As finds e, whose message
// alone reaches API clients, and errors.Is and errors.As find cause too. Its
// text is e's message, then cause's, for logs.
func Caused(e *Error, cause error) error { return &causedError{domain: e, err: cause} }

type causedError struct {
	domain *Error
	err    error
}

func (e *causedError) Error() string   { return e.domain.Message + ": " + e.err.Error() }
func (e *causedError) Unwrap() []error { return []error{e.domain, e.err} }
