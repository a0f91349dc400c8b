package fence_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/leasewatch/leasewatch/audit/fence"
)

func TestGuard(t *testing.T) {
	var g fence.Guard // the zero Guard is ready
	if _, ok := g.Highest("orders"); ok {
		t.Fatalf("Highest on an empty Guard reports a token")
	}
	steps := []struct {
		name        string
		lock        string
		token       int64
		want        fence.Outcome
		wantHighest int64
	}{
		{"FirstTokenAccepted", "orders", 41, fence.Accepted, 41},
		{"SameHolderWritesAgain", "orders", 41, fence.Accepted, 41},
		{"NewHolderAccepted", "orders", 42, fence.Accepted, 42},
		{"PausedHolderWriteRejected", "orders", 41, fence.Rejected, 42},
		{"OtherLockIndependent", "invoices", 1, fence.Accepted, 1},
		{"SkippedTokensAccepted", "orders", 50, fence.Accepted, 50},
		{"ZeroTokenRejectedAfterGrants", "orders", 0, fence.Rejected, 50},
	}
	for _, s := range steps {
		got, highest := g.Check(s.lock, s.token)
		if got != s.want || highest != s.wantHighest {
			t.Fatalf("%s: Check(%s, %d) = %q, %d; want %q, %d",
				s.name, s.lock, s.token, got, highest, s.want, s.wantHighest)
		}
	}
	if h, ok := g.Highest("orders"); !ok || h != 50 {
		t.Fatalf("Highest(orders) = %d, %v; want 50, true", h, ok)
	}
}

func TestGuardConcurrent(t *testing.T) {
	const (
		workers = 16
		tokens  = 2000
	)
	locks := []string{"a", "b", "c"}
	var g fence.Guard

	// Every worker presents every token of every lock in its own random order.
	// Whatever the interleaving, an accepted token is the new highest, a
	// rejected one is below the highest, and the highest token wins in the end.
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for _, i := range rng.Perm(tokens * len(locks)) {
				lock, token := locks[i%len(locks)], int64(i/len(locks)+1)
				got, highest := g.Check(lock, token)
				switch {
				case got == fence.Accepted && highest != token:
					errs <- "accepted token is not the new highest"
					return
				case got == fence.Rejected && highest <= token:
					errs <- "rejected a token not below the highest"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, lock := range locks {
		if h, _ := g.Highest(lock); h != tokens {
			t.Errorf("Highest(%s) = %d, want %d", lock, h, tokens)
		}
		if got, _ := g.Check(lock, tokens-1); got != fence.Rejected {
			t.Errorf("Check(%s, %d) after all = %q, want rejected", lock, tokens-1, got)
		}
	}
}
