package web

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"
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
	return b
}

func (s *Server) handleOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIJSON)
}
