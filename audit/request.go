package audit

import "maps"

// RequestKey is the scope within which a write report's RequestID is unique:
// one source, lock and resource. A retry reports the same write to the same
// resource, so two resources that each number their requests from 1 never
// collide.
type RequestKey struct {
	Lock      LockKey
	Resource  string
	RequestID string
}

// RequestKey returns w's idempotency key, and false if w has no RequestID.
func (w WriteReport) RequestKey() (RequestKey, bool) {
	return RequestKey{Lock: w.Key(), Resource: w.Resource, RequestID: w.RequestID}, w.RequestID != ""
}

// SameWrite reports whether w repeats prev, a report under the same
// RequestKey: the same outcome, token, highest token and holder, and the same
// time unless w gave none (its At is then only when it was received).
func (w WriteReport) SameWrite(prev WriteReport) bool {
	return w.Outcome == prev.Outcome && w.Holder == prev.Holder &&
		sameToken(w.Token, prev.Token) && sameToken(w.HighestToken, prev.HighestToken) &&
		(w.AtDefaulted || w.At.Equal(prev.At))
}

func sameToken(a, b *int64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// writeReportOf returns the report a stored write event was made from, with
// its Lock set, and false if e is not a write.
func writeReportOf(e Event) (WriteReport, bool) {
	we, ok := WriteEventOf(e)
	if !ok {
		return WriteReport{}, false
	}
	return WriteReport{Source: e.Lock.Source, Lock: e.Lock.Name, Resource: e.Resource, Token: e.Token,
		Outcome: we.Outcome, HighestToken: we.HighestToken, Holder: e.Holder, At: e.At, RequestID: e.RequestID}, true
}

// claimRequests checks one request's writes against known, the reports
// already stored or accepted earlier in the group commit by RequestKey. It
// returns the writes to record (retries left out) and adds their keys to
// known; or, if any write reuses a key for a different write, an ECONFLICT
// naming it, and known is left as it was: nothing of the request is
// recorded.
func claimRequests(known map[RequestKey]WriteReport, writes []WriteReport) ([]WriteReport, error) {
	fresh := make([]WriteReport, 0, len(writes))
	var mine map[RequestKey]WriteReport
	for i, w := range writes {
		key, ok := w.RequestKey()
		if !ok {
			fresh = append(fresh, w)
			continue
		}
		prev, seen := known[key]
		if !seen {
			prev, seen = mine[key]
		}
		if seen {
			if !w.SameWrite(prev) {
				return nil, Errorf(ECONFLICT, "%s: already used for a different write report of this source, lock and resource; a retry must repeat the report unchanged",
					writeField(i, len(writes), "request_id"))
			}
			continue
		}
		if mine == nil {
			mine = make(map[RequestKey]WriteReport)
		}
		mine[key] = w
		fresh = append(fresh, w)
	}
	maps.Copy(known, mine)
	return fresh, nil
}
