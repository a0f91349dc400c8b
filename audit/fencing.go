package audit

import "fmt"

// Fence is the fencing token under which a replica owns a source, when
// several replicas share one store: every grant of the source's ownership
// lease has a larger token than the grants before it (an etcd leader key's
// CreateRevision, a Kubernetes Lease's transitions under a fresh identity).
//
// The store keeps, per source, the highest token a batch has carried. A
// batch under a lower token comes from a replica whose lease has passed to
// another (paused, partitioned, or slow to notice), and the store refuses
// all of it; an equal token is the owner writing again.
type Fence struct {
	Source string
	Token  int64
}

// StaleFence explains an EFENCED refusal: the batch carried Token for
// Source, and the store's fence of the source is already at Highest.
type StaleFence struct {
	Source  string
	Token   int64
	Highest int64
}

func (e *StaleFence) Error() string {
	return fmt.Sprintf("fence of source %q is at token %d, above %d", e.Source, e.Highest, e.Token)
}

// FencedError is the error a Journal's Apply returns for a batch whose fence
// f is older than the source's fence at highest: EFENCED, naming the source
// and both tokens, explained by a *StaleFence that errors.As finds.
func FencedError(f Fence, highest int64) error {
	return Caused(Errorf(EFENCED, "source %q is owned under token %d: the commit under token %d was refused, and nothing of it stored",
		f.Source, highest, f.Token), &StaleFence{Source: f.Source, Token: f.Token, Highest: highest})
}
