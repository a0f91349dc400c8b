package audit

import "context"

// Reads is a Store whose locks and tenures show every durable renewal: what
// the dashboard, the API, alerts and metrics read. A Recorder holds renewals
// back from the lock and tenure rows until its next sync, so the rows alone
// can be behind; only this package makes a Reads, so a reader that needs
// current renewals cannot be given the rows by mistake. Recorder.Fresh
// makes one over the recorder's journal, Settled one over a store that no
// recorder writes to now.
type Reads interface {
	Store
	current() // only this package's Reads
}

// Fresh returns s with the renewals that r holds back from the lock and
// tenure rows until its next sync (see Recorder) laid over what s reads, so
// every durable renewal shows at once. s must read r's journal.
func (r *Recorder) Fresh(s Store) Reads { return freshStore{Store: s, r: r} }

// Settled returns s as Reads, for a store no recorder is writing to (a
// report or a copy of a stopped service's database, tests of reads): its
// rows hold every renewal there is.
func Settled(s Store) Reads { return settled{s} }

type settled struct{ Store }

func (settled) current() {}

func (freshStore) current() {}

type freshStore struct {
	Store
	r *Recorder
}

// renewal returns the unsaved renewal of a lock, if any.
func (r *Recorder) renewal(key LockKey) (Renewal, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unsaved.get(key)
}

// unsavedCount returns how many locks have unsaved renewals.
func (r *Recorder) unsavedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.unsaved)
}

// freshen lays l's unsaved renewal over it.
func (f freshStore) freshen(l *Lock) {
	if l.State != StateHeld {
		return
	}
	if rn, ok := f.r.renewal(l.Key()); ok && rn.RenewedAt.After(l.RenewedAt) {
		l.RenewedAt, l.ExpiresAt, l.LeaseDuration = rn.RenewedAt, rn.ExpiresAt, rn.LeaseDuration
	}
}

// expiring reports whether l passes f's ExpiringBy filter.
func expiring(l Lock, f LockFilter) bool {
	return l.State == StateHeld && !l.ExpiresAt.IsZero() && l.LeaseDuration > 0 &&
		float64(l.ExpiresAt.Sub(f.ExpiringAt)) < f.ExpiringBy*float64(l.LeaseDuration)
}

func (f freshStore) Locks(ctx context.Context, lf LockFilter) ([]Lock, error) {
	if lf.ExpiringBy <= 0 {
		locks, err := f.Store.Locks(ctx, lf)
		for i := range locks {
			f.freshen(&locks[i])
		}
		return locks, err
	}
	// The rows may call a lock near expiry that has renewed since: ask for
	// enough more to drop those and still fill the page.
	want := lf.Limit
	if want > 0 {
		lf.Limit += f.r.unsavedCount()
	}
	locks, err := f.Store.Locks(ctx, lf)
	if err != nil {
		return nil, err
	}
	kept := locks[:0]
	for _, l := range locks {
		f.freshen(&l)
		if expiring(l, lf) {
			kept = append(kept, l)
		}
	}
	if want > 0 && len(kept) > want {
		kept = kept[:want]
	}
	return kept, nil
}

func (f freshStore) CountLocks(ctx context.Context, lf LockFilter) (int, error) {
	if lf.ExpiringBy <= 0 || f.r.unsavedCount() == 0 {
		return f.Store.CountLocks(ctx, lf)
	}
	if lf.Limit <= 0 {
		lf.Limit = maxFreshCount
	}
	locks, err := f.Locks(ctx, lf)
	return len(locks), err
}

// maxFreshCount caps an uncapped near-expiry count while renewals are unsaved.
const maxFreshCount = 10_000

func (f freshStore) Lock(ctx context.Context, id int64) (Lock, error) {
	l, err := f.Store.Lock(ctx, id)
	f.freshen(&l)
	return l, err
}

func (f freshStore) LockByKey(ctx context.Context, key LockKey) (Lock, error) {
	l, err := f.Store.LockByKey(ctx, key)
	f.freshen(&l)
	return l, err
}

func (f freshStore) Tenures(ctx context.Context, lockID int64, tf TimeFilter) ([]Tenure, error) {
	tenures, err := f.Store.Tenures(ctx, lockID, tf)
	if err != nil || len(tenures) == 0 {
		return tenures, err
	}
	// A lock's unsaved renewal belongs to its newest tenure, if still held.
	f.freshenTenure(&tenures[len(tenures)-1])
	return tenures, nil
}

func (f freshStore) TenuresByHolder(ctx context.Context, hf HolderFilter) ([]Tenure, error) {
	tenures, err := f.Store.TenuresByHolder(ctx, hf)
	for i := range tenures {
		f.freshenTenure(&tenures[i])
	}
	return tenures, err
}

// freshenTenure lays the unsaved renewal of t's lock over t, if t is the
// tenure it renewed and is still held.
func (f freshStore) freshenTenure(t *Tenure) {
	if !t.Held() {
		return
	}
	if rn, ok := f.r.renewal(t.Lock); ok && rn.Seq == t.Seq && rn.RenewedAt.After(t.LastRenewedAt) {
		t.Renewals, t.LastRenewedAt, t.ExpiresAt, t.LeaseDuration = rn.Renewals, rn.RenewedAt, rn.ExpiresAt, rn.LeaseDuration
	}
}
