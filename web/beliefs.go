package web

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
)

// handleBeliefs takes holders' beliefs (audit.Belief): a holder's word that
// it acts under a lock's token, sent every few seconds while it does. It is
// an ingest request like POST /api/v1/writes: the same token, limits and
// validation of the whole body before any of it is judged, and 202 once what
// the beliefs showed is durable.
func (s *Server) handleBeliefs(c echo.Context) error {
	body, err := s.ingestBody(c)
	if err != nil {
		return err
	}
	beliefs, err := decodeBeliefs(body, s.known, s.now().UTC())
	if err != nil {
		return err
	}
	if err := s.writes.ReportBeliefs(c.Request().Context(), beliefs); err != nil {
		return err
	}
	s.metrics.beliefs.Add(float64(len(beliefs)))
	return c.JSON(http.StatusAccepted, map[string]int{"accepted": len(beliefs)})
}

// decodeBeliefs decodes a body of one belief or an array of them, failing
// with EINVALID naming the first bad field as decodeWrites does. at defaults
// to now.
func decodeBeliefs(body []byte, known map[string]audit.SourceKind, now time.Time) ([]audit.Belief, error) {
	return decodeBatch(body, "belief", "beliefs", func(raw []byte, at string) (audit.Belief, error) {
		return decodeBelief(raw, at, known, now)
	})
}

// decodeBelief decodes one belief object: source, lock and token required,
// holder and at optional.
func decodeBelief(raw []byte, at string, known map[string]audit.SourceKind, now time.Time) (audit.Belief, error) {
	var b audit.Belief
	var token *int64
	bad, err := decodeObject(raw, at, "belief", func(key string, val json.RawMessage) (ok bool, err error) {
		switch key {
		case "source":
			b.Source, err = jsonSource(val, known)
		case "lock":
			b.Lock, err = jsonString(val, maxIngestString)
		case "holder":
			b.Holder, err = jsonString(val, maxIngestString)
		case "token":
			token, err = jsonToken(val)
		case "at":
			b.At, err = jsonReportTime(val, now)
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return b, err
	}
	if err := required(bad, "source", b.Source, "lock", b.Lock); err != nil {
		return b, err
	}
	if token == nil {
		// A belief without a token says nothing a tenure can be told by.
		return b, bad("token", "required: the fencing token the holder acts under")
	}
	b.Token = *token
	if b.At.IsZero() {
		b.At = now
	}
	return b, nil
}
