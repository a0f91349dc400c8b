package web

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// The kept verdicts (audit/verdict Keeper: each lock's verdict over the
// last 24 hours) filter the locks list and the API's lock lists.

// parseVerdict reads verdict=, a kept verdict to filter locks by.
func parseVerdict(q url.Values) (string, error) {
	v := q.Get("verdict")
	if v == "" || verdict.Kind(v).Valid() {
		return v, nil
	}
	return "", mustBe("verdict", verdict.Kinds)
}

// mustBe is the error of a parameter that is none of values.
func mustBe[T ~string](param string, values []T) error {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = strconv.Quote(string(v))
	}
	return audit.Errorf(audit.EINVALID, "%s: must be %s", param, strings.Join(quoted, ", "))
}
