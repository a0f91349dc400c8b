package ownership

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Labels of the Leases a KubernetesElector writes, so that an operator
// (and Members) can tell them from the cluster's other Leases.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelRole      = "leasewatch.io/ownership"
	roleMember     = "member"
	roleSource     = "source"
)

// KubernetesConfig configures a KubernetesElector.
type KubernetesConfig struct {
	// Identity names this replica: its member Lease's holder, and the start
	// of each campaign's holder identity.
	Identity string
	// Namespace holds the Leases: leasewatch's own.
	Namespace string
	Timing    Timing
}

// KubernetesElector elects owners with client-go's leader election over a
// coordination.k8s.io/v1 Lease per source (SourceLeaseName), in
// leasewatch's own namespace. Each replica also holds a member Lease of its
// own (MemberLeaseName), which Members counts.
//
// The token is the Lease's leaseTransitions, which client-go raises by one
// whenever a holder other than the last observed one takes the Lease. A
// process that kept its identity across a restart would renew its old
// record as if it had never stopped, under the same token (a token_reuse
// in leasewatch's own terms), so every campaign has an identity of its own:
// the replica's identity, the process ID and a random nonce. Deleting a
// source's Lease resets its count, so leasewatch's RBAC grants no delete.
type KubernetesElector struct {
	cs     kubernetes.Interface
	cfg    KubernetesConfig
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	done   chan struct{} // closed when the member Lease is released

	mu       sync.Mutex
	observed map[string]observation // member Leases by name
}

var _ Elector = (*KubernetesElector)(nil)

// observation is when a member Lease's record was last seen to change: a
// member is live until that time plus its lease duration, on this replica's
// clock, as client-go judges a holder (the holders' clocks may differ).
type observation struct {
	record   string
	at       time.Time
	duration time.Duration
}

// NewKubernetesElector returns an elector that talks to the apiserver
// through cs, and starts holding the replica's member Lease.
func NewKubernetesElector(cs kubernetes.Interface, cfg KubernetesConfig) (*KubernetesElector, error) {
	cfg.Timing = cfg.Timing.WithDefaults()
	switch {
	case strings.TrimSpace(cfg.Identity) == "":
		return nil, errors.New("identity: required")
	case len(validation.IsDNS1123Label(cfg.Namespace)) > 0:
		return nil, fmt.Errorf("namespace: %q is not a namespace name", cfg.Namespace)
	}
	if err := cfg.Timing.Validate(); err != nil {
		return nil, err
	}
	e := &KubernetesElector{cs: cs, cfg: cfg, done: make(chan struct{}), observed: make(map[string]observation)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.holdMembership()
	return e, nil
}

// Identity is the replica's identity.
func (e *KubernetesElector) Identity() string { return e.cfg.Identity }

// holdMembership holds the member Lease until Close, and takes it again
// when a renewal failed. Its holder is the replica's identity as it is:
// membership needs no token, and a restarted replica renews its member
// Lease at once instead of waiting for the old one to run out.
func (e *KubernetesElector) holdMembership() {
	defer close(e.done)
	lock := e.lock(MemberLeaseName(e.cfg.Identity), e.cfg.Identity, roleMember)
	for e.ctx.Err() == nil {
		le, err := e.leaderElector(lock, func(context.Context) {}, func() {})
		if err != nil {
			return // Timing was validated: unreachable
		}
		le.Run(e.ctx)
	}
}

func (e *KubernetesElector) lock(name, identity, role string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: name},
		Client:     e.cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		Labels:     map[string]string{LabelManagedBy: "leasewatch", LabelRole: role},
	}
}

func (e *KubernetesElector) leaderElector(lock resourcelock.Interface, started func(context.Context), stopped func()) (*leaderelection.LeaderElector, error) {
	t := e.cfg.Timing
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   t.LeaseDuration,
		RenewDeadline:   t.RenewDeadline,
		RetryPeriod:     t.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            lock.Describe(),
		Callbacks:       leaderelection.LeaderCallbacks{OnStartedLeading: started, OnStoppedLeading: stopped},
	})
}

// Members counts the member Leases that are held and were renewed within
// their lease duration, as this replica observed them; this replica counts
// even before its own member Lease is written.
func (e *KubernetesElector) Members(ctx context.Context) (n, rank int, err error) {
	list, err := e.cs.CoordinationV1().Leases(e.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRole + "=" + roleMember})
	if err != nil {
		return 0, 0, fmt.Errorf("list the replicas' member Leases: %w", err)
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	seen := make(map[string]observation, len(list.Items))
	self := false
	for i := range list.Items {
		l := &list.Items[i]
		o, rec := e.observed[l.Name], memberRecord(l)
		if o.record != rec {
			o = observation{record: rec, at: now, duration: leaseDuration(l)}
		}
		seen[l.Name] = o
		if holder(l) != "" && now.Before(o.at.Add(o.duration)) {
			n++
			self = self || holder(l) == e.cfg.Identity
			if holder(l) < e.cfg.Identity {
				rank++
			}
		}
	}
	e.observed = seen
	if !self {
		n++
	}
	return n, rank, nil
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil {
		return 0
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// memberRecord is what changes with each renewal of a member Lease.
func memberRecord(l *coordinationv1.Lease) string {
	var renew string
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	return holder(l) + "@" + renew
}

// Campaign runs a leader election on the source's Lease under a fresh
// identity until it is granted, and returns its term; the election goes on
// renewing until the term is lost or resigned. allow gates the write that
// would take the Lease (gatedLock).
func (e *KubernetesElector) Campaign(ctx context.Context, source string, allow func(takeover bool) bool) (*Term, error) {
	if e.ctx.Err() != nil {
		return nil, errClosed
	}
	id, err := campaignIdentity(e.cfg.Identity)
	if err != nil {
		return nil, err
	}
	lock := &gatedLock{LeaseLock: e.lock(SourceLeaseName(source), id, roleSource), allow: allow}
	started := make(chan context.Context, 1)
	stopped := make(chan struct{})
	le, err := e.leaderElector(lock, func(c context.Context) { started <- c }, func() { close(stopped) })
	if err != nil {
		return nil, err
	}
	// The term outlives the campaign's ctx: it ends on Resign, a failed
	// renewal or Close.
	run, stop := context.WithCancel(e.ctx)
	go le.Run(run)
	select {
	case held := <-started:
		return &Term{Source: source, Token: lock.token(), lost: e.watchdog(held, lock, stop), resign: func(ctx context.Context) error {
			stop()
			select {
			case <-stopped: // released (ReleaseOnCancel) or lost
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}, nil
	case <-stopped:
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errClosed
	case <-ctx.Done():
		stop()
		<-stopped
		// A grant that raced with the cancel is released by the election.
		return nil, ctx.Err()
	}
}

// watchdog returns the term's Lost channel: closed when the election ends
// (held is done), or as soon as no renewal has succeeded for RenewDeadline
// since it was sent, when it also stops the election. client-go itself
// ends held only after it has tried to release the Lease, which for an
// unreachable apiserver takes another RenewDeadline.
func (e *KubernetesElector) watchdog(held context.Context, lock *gatedLock, stop context.CancelFunc) <-chan struct{} {
	lost := make(chan struct{})
	t := e.cfg.Timing
	go func() {
		defer close(lost)
		tick := time.NewTicker(t.RetryPeriod / 4)
		defer tick.Stop()
		for {
			select {
			case <-held.Done():
				return
			case <-tick.C:
				if time.Since(lock.lastRenewal()) > t.RenewDeadline {
					stop()
					return
				}
			}
		}
	}()
	return lost
}

// campaignIdentity is identity/PID/nonce: unique to one campaign of one
// process, so that every grant raises leaseTransitions.
func campaignIdentity(identity string) (string, error) {
	nonce := make([]byte, 6)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("campaign identity: %w", err)
	}
	return fmt.Sprintf("%s/%d/%s", identity, os.Getpid(), hex.EncodeToString(nonce)), nil
}

// gatedLock is a LeaseLock whose first write, the one that would take the
// Lease, happens only when allow agrees. The election keeps reading the
// Lease meanwhile, so a refused candidate keeps its observation of the
// holder fresh and can take over as soon as the lease runs out. It also
// keeps the token of the grant: leaseTransitions as written by the
// acquiring write, which the apiserver accepted over the record read
// (resourceVersion), so no other grant came between.
type gatedLock struct {
	*resourcelock.LeaseLock
	allow func(takeover bool) bool

	mu       sync.Mutex
	held     bool
	previous string    // the holder of the record last read
	granted  int64     // the token of the grant
	renewed  time.Time // when the last successful write was sent
}

// Get reads the record and notes its holder.
func (l *gatedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.LeaseLock.Get(ctx)
	if err == nil {
		l.mu.Lock()
		l.previous = rec.HolderIdentity
		l.mu.Unlock()
	}
	return rec, raw, err
}

// Create writes the Lease of a source never held before: a grant.
func (l *gatedLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.LeaseLock.Create)
}

// Update renews, releases or (the first time) takes the Lease.
func (l *gatedLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, ler, l.LeaseLock.Update)
}

var errNotAllowed = errors.New("ownership: this replica holds its share of the sources")

func (l *gatedLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord, write func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	l.mu.Lock()
	held, takeover := l.held, l.previous != ""
	l.mu.Unlock()
	if !held && !l.allow(takeover) {
		return errNotAllowed
	}
	sent := time.Now()
	if err := write(ctx, ler); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !held {
		l.held, l.granted = true, int64(ler.LeaderTransitions)
	}
	l.renewed = sent
	return nil
}

// lastRenewal is when the last successful write (the grant or a renewal)
// was sent.
func (l *gatedLock) lastRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

func (l *gatedLock) token() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.granted
}

// Close releases the member Lease, which ends the membership at once.
func (e *KubernetesElector) Close() error {
	e.cancel()
	<-e.done
	return nil
}

// SourceLeaseName is the name of source's Lease: leasewatch-source-, the
// name made a DNS-1123 label (lower case, other characters as '-', at most
// 30 of them) and a hash of the name as it is, so that names alike after
// that (Prod and prod, a/b and a-b) still get Leases of their own.
func SourceLeaseName(source string) string { return leaseName("leasewatch-source-", source) }

// MemberLeaseName is the name of the member Lease of the replica with
// identity, made as SourceLeaseName makes a source's.
func MemberLeaseName(identity string) string { return leaseName("leasewatch-member-", identity) }

func leaseName(prefix, name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if b.Len() == 30 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(name))
	readable := strings.Trim(b.String(), "-")
	if readable != "" {
		readable += "-"
	}
	return prefix + readable + hex.EncodeToString(sum[:6])
}
