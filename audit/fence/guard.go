package fence

import "sync"

// Guard is an in-memory fence: it remembers the highest token accepted per
// lock and rejects lower ones. It suits a resource that lives in one process;
// its memory is lost on restart. The zero Guard is ready to use and is safe
// for concurrent use.
//
// Hold the Guard's verdict and the write together: check and write under the
// same mutex as the resource (or let the resource serialise writes), or a
// newer holder's write can land between an older holder's Check and its write.
type Guard struct {
	mu      sync.Mutex
	highest map[string]int64
}

// Check accepts token if it is at least the highest token seen for lock and
// records it as the new highest; otherwise it rejects. It returns the highest
// token for lock after the check, which is token itself when accepted.
// Key locks by everything that names them (for example "prod-etcd//locks/orders"):
// tokens of different locks are not comparable.
func (g *Guard) Check(lock string, token int64) (outcome Outcome, highest int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.highest[lock]; ok && token < h {
		return Rejected, h
	}
	if g.highest == nil {
		g.highest = make(map[string]int64)
	}
	g.highest[lock] = token
	return Accepted, token
}

// Highest returns the highest token accepted for lock, and false if Check has
// accepted none.
func (g *Guard) Highest(lock string) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.highest[lock]
	return h, ok
}
