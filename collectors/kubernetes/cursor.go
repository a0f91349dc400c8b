package kubernetes

import (
	"fmt"
	"net/url"
	"strings"
)

// A cursor records, for each watch, the resourceVersion up to which the
// collector's inputs are durable. With one watch of all namespaces it is that
// watch's resourceVersion ("48213"). With configured namespaces each has its
// own watch, and Kubernetes orders events only within one watch, so the
// cursor keeps one resourceVersion per namespace, form-encoded
// ("default=48213&team-a=48190"); each watch resumes from its own.
// resourceVersions are opaque: they are stored and sent back, never compared.

// encodeCursor renders the resourceVersion of each scope (namespace, or ""
// for all of them).
func encodeCursor(rvs map[string]string) string {
	if rv, ok := rvs[""]; ok && len(rvs) == 1 {
		return rv
	}
	v := make(url.Values, len(rvs))
	for ns, rv := range rvs {
		v.Set(ns, rv)
	}
	return v.Encode()
}

// decodeCursor parses a stored cursor for the given scopes. It fails when the
// cursor does not cover exactly those scopes, as after a change of the
// configured namespaces: then no single resume point is right for all of
// them.
func decodeCursor(pos string, scopes []string) (map[string]string, error) {
	if len(scopes) == 1 && scopes[0] == "" {
		if strings.Contains(pos, "=") {
			return nil, fmt.Errorf("stored cursor %q is per namespace, but the source now watches all namespaces", pos)
		}
		return map[string]string{"": pos}, nil
	}
	v, err := url.ParseQuery(pos)
	if err != nil || len(v) == 0 || !strings.Contains(pos, "=") {
		return nil, fmt.Errorf("stored cursor %q is not per namespace, but the source now watches namespaces %s", pos, strings.Join(scopes, ", "))
	}
	rvs := make(map[string]string, len(scopes))
	for _, ns := range scopes {
		rv := v.Get(ns)
		if rv == "" {
			return nil, fmt.Errorf("stored cursor %q has no resourceVersion for namespace %s", pos, ns)
		}
		rvs[ns] = rv
	}
	if len(v) != len(scopes) {
		return nil, fmt.Errorf("stored cursor %q covers namespaces the source no longer watches", pos)
	}
	return rvs, nil
}
