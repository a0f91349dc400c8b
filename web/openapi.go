package web

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"

	"github.com/leasewatch/leasewatch/audit"
)

// openAPIYAML is the HTTP API's OpenAPI 3.1 description, kept beside the
// handlers it describes; the tests validate every endpoint's answers
// against it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON is openAPIYAML as JSON, made once: what
// GET /api/v1/openapi.json serves.
var openAPIJSON = mustJSON(openAPIYAML)

func mustJSON(doc []byte) []byte {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		panic(fmt.Sprintf("web/openapi.yaml: %v", err))
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("web/openapi.yaml as JSON: %v", err))
	}
	return escapeUnprintable(b)
}

// escapeUnprintable writes the audit.Unprintable characters that
// json.Marshal leaves as they are (DEL, C1 and bidirectional controls) as
// \u escapes: the document's patterns name them, and a reader of the served
// document should see \u202e where a character that reorders the text
// around it would be. Compact JSON has them only inside strings.
func escapeUnprintable(doc []byte) []byte {
	var b bytes.Buffer
	for _, r := range string(doc) {
		if audit.Unprintable(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.Bytes()
}

func (s *Server) handleOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIJSON)
}
