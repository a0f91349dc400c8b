package synth

import (
	"context"
	"testing"
	"time"
)

func TestTimingTmp(t *testing.T) {
	start := time.Now()
	path, sum, err := Cached(context.Background(), "/work/main/.cache/bench", Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v in %v", path, sum, time.Since(start))
}
