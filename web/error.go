package web

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// retryAfter is the Retry-After of a 503, in seconds: about when the
// recorder, which probes a failing store every second, has found it back.
const retryAfter = "2"

// retryAfterFenced is the Retry-After of a fenced refusal (replication: this
// replica does not own a source of the request). Nothing needs to recover,
// the client only needs to reach another replica, so it may come back soon.
const retryAfterFenced = "1"

// statusClientClosed is nginx's status for a request its client abandoned.
const statusClientClosed = 499

// httpStatus is the one map from audit error codes to HTTP statuses.
func httpStatus(code string) int {
	switch code {
	case audit.EINVALID:
		return http.StatusBadRequest
	case audit.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case audit.ENOTFOUND:
		return http.StatusNotFound
	case audit.ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	case audit.ECONFLICT:
		return http.StatusConflict
	case audit.EUNSUPPORTED:
		return http.StatusUnsupportedMediaType
	case audit.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case audit.EFENCED:
		// This replica no longer owns the source (replication): nothing
		// was stored, and the request may be sent again, to the owner.
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// errorResponse returns the status and the user-facing message for err.
// Internal errors get a generic message: their text may name files, SQL or
// hosts.
func errorResponse(err error) (int, string) {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		// Raised by echo itself: unknown route, wrong method, missing static file.
		msg := strings.ToLower(http.StatusText(he.Code))
		if he.Code >= http.StatusInternalServerError || msg == "" {
			msg = "internal error"
		}
		return he.Code, msg
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, "request body too large"
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.status, se.msg
	}
	return httpStatus(audit.ErrorCode(err)), audit.ErrorMessage(err)
}

// handleError is echo's HTTPErrorHandler: it answers every failed request,
// as {"error": "..."} under /api/ and for .json exports, as text for .md
// exports, and as a small page elsewhere.
func (s *Server) handleError(err error, c echo.Context) {
	req := c.Request()
	status, msg := errorResponse(err)
	if req.Context().Err() != nil {
		var ok bool
		if status, msg, ok = bodyTimedOut(c); !ok {
			// The client went away (closed the page, gave up waiting) and
			// took the request's context with it: whatever failed then is
			// not leasewatch's failure, and no one reads an answer. The
			// status is nginx's 499, for the request metrics.
			s.logger.Debug("client went away", "method", req.Method, "route", c.Path(), "err", err)
			if !c.Response().Committed {
				c.Response().WriteHeader(statusClientClosed)
			}
			return
		}
	}
	if c.Response().Committed {
		s.logger.Error("request failed after the response started",
			"method", req.Method, "route", c.Path(), "err", err)
		return
	}
	if status >= http.StatusInternalServerError {
		s.logger.Error("request failed",
			"method", req.Method, "route", c.Path(), "path", req.URL.Path, "status", status, "err", err)
	}
	s.refusalHeaders(c, status, audit.ErrorCode(err))

	// A HEAD answer is rendered as GET's, for the same headers; net/http
	// drops its body.
	var werr error
	switch route := c.Path(); {
	case isAPI(req) || strings.HasSuffix(route, ".json"):
		werr = c.JSON(status, map[string]string{"error": msg})
	case strings.HasSuffix(route, ".md"):
		werr = c.String(status, msg+"\n")
	default:
		var buf bytes.Buffer
		page := views.ErrorPage{Status: status, Title: http.StatusText(status), Message: msg}
		if rerr := views.Error(page).Render(req.Context(), &buf); rerr != nil {
			s.logger.Error("render error page", "err", rerr)
			werr = c.String(status, msg+"\n")
		} else {
			werr = c.HTMLBlob(status, buf.Bytes())
		}
	}
	if werr != nil {
		s.logger.Debug("write error response", "err", werr)
	}
}

// refusalHeaders sets the headers that tell a refused client what to do
// next: the bearer challenge of ingest, when to retry, and a new connection.
func (s *Server) refusalHeaders(c echo.Context, status int, code string) {
	h := c.Response().Header()
	// Ingest takes its bearer tokens alone; the dashboard's basic
	// authentication sets its own challenge.
	if status == http.StatusUnauthorized && ingestRoute(c.Path()) {
		h.Set(echo.HeaderWWWAuthenticate, `Bearer realm="leasewatch"`)
	}
	// A store that is down (a restarting database, a full disk) is the
	// usual 503: the client is told when to try again.
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", retryAfter)
	}
	// A fenced refusal is answered by a replica that does not own the
	// source; so would every retry on this connection be. Closing it makes
	// the client's retry open a new one, which a Service (kube-proxy
	// balances connections, not requests) may send to the owner.
	if code == audit.EFENCED {
		h.Set("Retry-After", retryAfterFenced)
		h.Set(echo.HeaderConnection, "close")
	}
	// The rest of a body that stopped coming is not read: the connection
	// cannot carry another request.
	if status == http.StatusRequestTimeout {
		h.Set(echo.HeaderConnection, "close")
	}
}

// bodyTimedOut reports whether the request's context ended because its body
// did not arrive within the server's read timeout: net/http cancels a
// request's context when a read from its connection fails, which makes a
// client that is too slow look like one that went away. ok is false for a
// client that went away. The write deadline, which the read timeout's
// neighbour may be about to pass, is extended for the answer.
func bodyTimedOut(c echo.Context) (status int, msg string, ok bool) {
	b, watched := c.Request().Body.(*bodyReader)
	if !watched || !b.timedOut() {
		return 0, "", false
	}
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(answerTimeout))
	return http.StatusRequestTimeout, "request timeout: the body did not arrive within the server's read timeout", true
}

// answerTimeout is how long the answer to a request whose body timed out
// may take to write.
const answerTimeout = 5 * time.Second

// statusError is a refusal with a status no audit error code maps to, made
// before any handler reads the request (a misdirected Host).
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// isAPI reports whether req is for the JSON API.
func isAPI(req *http.Request) bool {
	return req.URL.Path == "/api" || strings.HasPrefix(req.URL.Path, "/api/")
}
