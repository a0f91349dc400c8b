package web

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/views"
)

// The kept verdicts (audit/verdict Keeper: each lock's verdict over the
// last 24 hours) in the locks list, the API's lock lists and the overview.

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

// verdictCounts are the overview's counts of locks per kept verdict, in
// verdict order, each linked to the locks list filtered by it.
func verdictCounts(counts map[string]int) []views.VerdictCount {
	out := make([]views.VerdictCount, 0, len(verdict.Kinds))
	for _, k := range verdict.Kinds {
		out = append(out, views.VerdictCount{Kind: string(k), N: counts[string(k)],
			URL: "/locks?" + url.Values{"verdict": {string(k)}}.Encode()})
	}
	return out
}

// The choices of the locks list's kind and verdict filters.
var (
	verdictNames = names(verdict.Kinds)
)

// names returns the names of a contract's values, in their order.
func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}
